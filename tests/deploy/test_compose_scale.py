"""The compose stack's scale-out profile (issue 16, item 4): several API processes behind one load balancer and
scalable Celery workers, all on the stack's one Qdrant server, PostgreSQL and Redis.

No Docker engine (and no `docker compose`) runs on the development machines, so, like tests/deploy/test_compose.py,
these tests read compose.yaml as compose would and check what can be checked without starting it: the replicas
serve without running the migrations, start after the migrating ``api`` is healthy, get the same settings as
``api``, and the load balancer's upstreams are exactly the API services on the port they listen on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ferret.core.settings import FerretSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
SCALE = ("api-replica", "api-lb")
_DEFAULT = re.compile(r"\$\{\w+:-(?P<default>[^}]*)\}")


def with_defaults(value: object) -> str:
    """Compose's interpolation of ``${VAR:-default}`` with an empty .env."""
    return _DEFAULT.sub(lambda match: match.group("default"), str(value))


def test_the_scale_services_start_only_with_the_scale_profile() -> None:
    for name in SCALE:
        assert SERVICES[name]["profiles"] == ["scale"]
    assert all("scale" not in service.get("profiles", []) for name, service in SERVICES.items() if name not in SCALE)


def test_replicas_serve_without_migrating_and_start_after_the_migrating_api_is_healthy() -> None:
    replica, api = SERVICES["api-replica"], SERVICES["api"]
    assert replica["command"] == ["ferret", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert "db upgrade" not in " ".join(replica["command"]), "two processes would race on the migrations"
    assert "ferret db upgrade &&" in " ".join(api["command"])
    assert replica["depends_on"]["api"] == {"condition": "service_healthy"}
    assert int(with_defaults(replica["deploy"]["replicas"])) >= 2
    assert "ports" not in replica, "replicas are reached through api-lb, not published one by one"
    assert "/health" in " ".join(replica["healthcheck"]["test"])


def test_replicas_get_the_same_image_settings_and_volume_as_the_api() -> None:
    replica, api = SERVICES["api-replica"], SERVICES["api"]
    for key in ("image", "environment", "env_file", "volumes"):
        assert replica[key] == api[key], key
    known = {"FERRET_DATABASE_URL"} | {f"FERRET_{field.upper()}" for field in FerretSettings.model_fields}
    assert "FERRET_API_REPLICAS" not in known and "FERRET_API_LB_PORT" not in known  # compose-only variables
    assert {key for key in replica["environment"] if key.startswith("FERRET_")} <= known


def test_the_balancer_proxies_to_every_api_service_on_its_port_and_publishes_on_loopback() -> None:
    balancer = SERVICES["api-lb"]
    (mount,) = balancer["configs"]
    config = COMPOSE["configs"][mount["source"]]["content"]
    upstreams = re.findall(r"^\s*server (\S+):(\d+);", config, flags=re.MULTILINE)
    assert sorted(upstreams) == [("api", "8000"), ("api-replica", "8000")]
    assert "proxy_pass http://ferret_api;" in config
    assert "$host" not in config.replace("$$host", ""), "a lone $ would be read by compose's interpolation"
    body_limit = re.search(r"client_max_body_size (\d+)m;", config)
    api_limit = int(with_defaults(SERVICES["api"]["environment"]["FERRET_API_MAX_BODY_BYTES"]))
    assert body_limit is not None and int(body_limit.group(1)) * 1_000_000 >= api_limit
    host, port, container = with_defaults(balancer["ports"][0]).split(":")
    assert (host, container) == ("127.0.0.1", "8080") and "listen 8080;" in config
    assert port != with_defaults(SERVICES["api"]["ports"][0]).split(":")[1], "the api keeps its own port"
    assert set(balancer["depends_on"]) == {"api", "api-replica"}
