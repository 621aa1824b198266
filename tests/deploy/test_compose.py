"""The production stack's structure: compose.yaml, Dockerfile, .env.example and .dockerignore.

No Docker engine runs on the development machines, so the stack is never started here. These tests read the files
as compose would (YAML with merge keys, ``${VAR:-default}`` interpolation with .env left empty) and check what can
be checked without an engine: services, pinned images, health checks, migrations before serving, the GPU
reservation, volumes, loopback-only ports, the settings every Ferret process needs, and that each ``ferret``
command the stack runs exists in the CLI.
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from importlib import import_module
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from sqlalchemy.engine import make_url

from ferret.core.settings import FerretSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")

STATEFUL = ("qdrant", "postgres", "redis")
WORKERS = ("worker-gpu", "worker-llm", "worker-cpu")
FERRET_SERVICES = ("api", *WORKERS, "admin")
REQUIRED = (*STATEFUL, *FERRET_SERVICES, "llm")
FERRET_HOME = "/var/lib/ferret"
SECRET = "s3cret"  # what a required ${VAR:?...} stands for in these tests

_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's interpolation with an empty .env: defaults apply, required secrets become ``SECRET``."""

    def substitute(match: re.Match[str]) -> str:
        op = match.group("op") or ""
        if op.endswith("-"):
            return match.group("arg")
        return SECRET if op.endswith("?") else ""

    parts = value.split("$$")  # an escaped dollar reaches the container as one literal '$'
    return "$".join(_VARIABLE.sub(substitute, part) for part in parts)


def environment(service: str) -> dict[str, str]:
    env = SERVICES[service].get("environment") or {}
    assert isinstance(env, dict), f"{service}: write environment as a mapping"
    return {key: interpolate(str(value)) for key, value in env.items()}


def command_text(service: str) -> str:
    command = SERVICES[service].get("command") or []
    return command if isinstance(command, str) else " ".join(str(part) for part in command)


def ferret_invocations(command: str | list[str]) -> Iterator[list[str]]:
    """Every ``ferret ...`` argument list in a command, including those inside an ``sh -c`` script."""
    if isinstance(command, list) and command[:2] == ["sh", "-c"]:
        command = command[2]
    if isinstance(command, str):
        segments = [shlex.split(segment) for segment in re.split(r"&&|\|\||;", command)]
    else:
        segments = [[str(part) for part in command]]
    for tokens in segments:
        if tokens and tokens[0] == "exec":
            tokens = tokens[1:]
        if tokens and tokens[0] == "ferret":
            yield tokens[1:]


def named_volumes(service: str) -> dict[str, str]:
    """Named volume -> mount path (bind mounts, which start with '.' or '/', are left out)."""
    mounts: dict[str, str] = {}
    for entry in SERVICES[service].get("volumes", []):
        source, target = interpolate(entry).split(":")[:2]
        if not source.startswith((".", "/")):
            mounts[source] = target
    return mounts


def test_every_required_service_is_there_and_only_the_llm_server_is_optional() -> None:
    assert set(REQUIRED) <= set(SERVICES)
    for name in (*STATEFUL, *FERRET_SERVICES):
        assert "profiles" not in SERVICES[name], f"{name} must start with a plain `docker compose up`"
    assert SERVICES["llm"]["profiles"] == ["llm"]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_image_is_pinned_to_a_version(name: str) -> None:
    image = interpolate(SERVICES[name]["image"])
    if "@sha256:" in image:
        return
    repository, _, tag = image.rpartition(":")
    assert repository and "/" not in tag, f"{name}: {image} has no tag"
    assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not pinned to a version"


def test_ferret_services_share_one_image_built_from_the_repository_at_the_package_version() -> None:
    project_version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    for name in (*FERRET_SERVICES, "cli"):
        service = SERVICES[name]
        assert interpolate(service["image"]) == f"ferret:{project_version}"
        assert service["build"]["context"] == "."
    assert f"\nFERRET_VERSION={project_version}\n" in (ROOT / ".env.example").read_text(encoding="utf-8")


def test_qdrant_server_speaks_the_pinned_client_version() -> None:
    """qdrant-client accepts a server whose major version matches and whose minor version differs by at most 1."""
    server = interpolate(SERVICES["qdrant"]["image"]).rpartition(":v")[2]
    server_major, server_minor = (int(part) for part in server.split(".")[:2])
    client_major, client_minor = (int(part) for part in version("qdrant-client").split(".")[:2])
    assert server_major == client_major and abs(server_minor - client_minor) <= 1


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_healthcheck_and_a_restart_policy(name: str) -> None:
    service = SERVICES[name]
    if "tools" in service.get("profiles", []):  # one-off `docker compose run` containers
        assert service["restart"] == "no"
        return
    healthcheck = service.get("healthcheck") or {}
    assert not healthcheck.get("disable"), f"{name}: health check disabled"
    assert healthcheck.get("test"), f"{name}: no health check"
    assert healthcheck["test"][0] in ("CMD", "CMD-SHELL")
    assert service.get("restart") == "unless-stopped"


def test_api_runs_the_migrations_and_serves_only_if_they_succeed() -> None:
    script = command_text("api")
    upgrade, serve = script.find("ferret db upgrade"), script.find("ferret serve")
    assert 0 <= upgrade < serve, script
    assert "&&" in script[upgrade:serve], "serve must not start after a failed migration"
    assert "/health" in " ".join(SERVICES["api"]["healthcheck"]["test"])


def test_gpu_worker_reserves_one_nvidia_gpu_and_uses_it() -> None:
    service = SERVICES["worker-gpu"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert environment("worker-gpu")["FERRET_DEVICE"] == "cuda"
    for name in ("api", "worker-llm", "worker-cpu", "admin"):
        assert "deploy" not in SERVICES[name]
        assert environment(name)["FERRET_DEVICE"] == "cpu"


@pytest.mark.parametrize("kind", ["gpu", "llm", "cpu"])
def test_each_worker_runs_its_kind_and_its_health_check_pings_that_app(kind: str) -> None:
    service = f"worker-{kind}"
    assert list(ferret_invocations(SERVICES[service]["command"])) == [["worker", "--kind", kind]]
    probe = " ".join(SERVICES[service]["healthcheck"]["test"])
    assert f"celery -A ferret.workers.apps.{kind} inspect ping" in probe
    assert "--timeout" in probe and "$$HOSTNAME" in probe


@pytest.fixture
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The worker containers' environment in this process; settings are re-read and forgotten afterwards."""
    from ferret.core.settings import get_settings

    env = environment("worker-gpu")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield env
    get_settings.cache_clear()


def import_worker_app(kind: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``ferret.workers.apps.<kind>`` imported afresh (the module builds its app from the settings at import), and
    forgotten after the test: an app built for the stack's broker must not serve later tests."""
    name = f"ferret.workers.apps.{kind}"
    monkeypatch.setitem(sys.modules, name, sys.modules.get(name))  # restored (or removed) after the test
    monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        module = import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("ferret.workers"):
            pytest.xfail(f"the Celery apps are not written yet (workers issue): {exc}")
        raise
    # `celery -A ferret.workers.apps.<kind>` finds the app under the name `app`.
    assert hasattr(module, "app"), f"{name} must hold its Celery app as `app` for `celery -A {name}`"
    return module.app


@pytest.mark.parametrize("kind", ["gpu", "llm", "cpu"])
def test_health_check_app_of_each_worker_loads_with_the_stack_environment(
    kind: str, worker_environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = import_worker_app(kind, monkeypatch)
    assert app.conf.broker_url == worker_environment["FERRET_BROKER_URL"]


def test_gpu_worker_runs_one_task_at_a_time(
    worker_environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = import_worker_app("gpu", monkeypatch)
    assert app.conf.worker_concurrency == 1
    assert app.conf.worker_prefetch_multiplier == 1


def test_state_lives_in_declared_named_volumes() -> None:
    declared = set(COMPOSE["volumes"])
    used = {volume for name in SERVICES for volume in named_volumes(name)}
    assert used <= declared, f"undeclared volumes: {used - declared}"
    assert named_volumes("qdrant")["qdrant-data"] == "/qdrant/storage"
    assert named_volumes("postgres")["postgres-data"] == "/var/lib/postgresql/data"
    assert named_volumes("redis")["redis-data"] == "/data"
    # Model versions are files under FERRET_HOME/models: the api and every worker must see the same ones.
    for name in (*FERRET_SERVICES, "cli"):
        assert named_volumes(name)["ferret-home"] == FERRET_HOME
        assert environment(name)["FERRET_HOME"] == FERRET_HOME


def test_only_api_admin_and_the_scale_profiles_balancer_publish_ports_and_only_on_loopback() -> None:
    published = {name: service["ports"] for name, service in SERVICES.items() if service.get("ports")}
    assert set(published) == {"api", "admin", "api-lb"}
    for name, ports in published.items():
        for port in ports:
            assert isinstance(port, str), f"{name}: use the HOST_IP:HOST_PORT:CONTAINER_PORT form"
            parts = interpolate(port).split(":")
            assert len(parts) == 3, f"{name}: {port} binds every interface; give the host address"
            assert parts[0] == "127.0.0.1", f"{name}: {port} is not bound to 127.0.0.1 by default"
    assert interpolate(SERVICES["api"]["ports"][0]).endswith(":8000")
    assert interpolate(SERVICES["admin"]["ports"][0]).endswith(":8501")


@pytest.mark.parametrize("name", [*FERRET_SERVICES, "cli"])
def test_ferret_services_get_the_database_broker_and_qdrant_of_the_stack(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = environment(name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    settings = FerretSettings()

    database = make_url(settings.database_url)
    assert database.drivername == "postgresql+psycopg" and database.host == "postgres"
    assert database.password == SECRET, "the database password must come from .env"
    assert settings.qdrant_url == "http://qdrant:6333"
    assert settings.qdrant_api_key is not None and settings.qdrant_api_key.get_secret_value() == SECRET
    for url in (settings.broker_url, settings.result_backend_url):
        assert url is not None and make_url(url).host == "redis" and make_url(url).password == SECRET
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert SERVICES[name]["env_file"] == [".env"]


def test_every_ferret_variable_in_the_stack_is_a_setting() -> None:
    known = {"FERRET_DATABASE_URL"} | {f"FERRET_{field.upper()}" for field in FerretSettings.model_fields}
    used = {key for name in FERRET_SERVICES for key in environment(name) if key.startswith("FERRET_")}
    assert used <= known, f"not Ferret settings: {used - known}"


@pytest.mark.parametrize("name", [*FERRET_SERVICES, "cli"])
def test_ferret_services_start_after_healthy_stateful_services(name: str) -> None:
    depends_on = SERVICES[name]["depends_on"]
    for dependency in STATEFUL:
        assert depends_on[dependency] == {"condition": "service_healthy"}
    if name != "api":  # the api's health means the schema is migrated
        assert depends_on["api"] == {"condition": "service_healthy"}


def test_llm_server_is_optional_internal_and_what_the_llm_worker_may_wait_for() -> None:
    llm = SERVICES["llm"]
    assert "ports" not in llm, "the LLM server is reached by the workers only"
    assert "/health" in " ".join(llm["healthcheck"]["test"])
    assert any(str(volume).endswith(":/models:ro") for volume in llm["volumes"])
    assert SERVICES["worker-llm"]["depends_on"]["llm"] == {"condition": "service_healthy", "required": False}


def test_admin_runs_ferret_admin_of_this_repository_without_telemetry() -> None:
    assert list(ferret_invocations(SERVICES["admin"]["command"])) == [["admin", "--host", "0.0.0.0", "--port", "8501"]]
    assert re.search(r"^WORKDIR /app$", DOCKERFILE, re.MULTILINE) and "COPY ui ui" in DOCKERFILE
    from ferret.ui.admin.launcher import APP, streamlit_arguments

    arguments = streamlit_arguments(host="0.0.0.0", port=8501)
    assert arguments[1:4] == ["-m", "streamlit", "run"] and Path(arguments[4]) == APP
    assert APP.is_relative_to(ROOT / "ui") and APP.is_file()
    options = dict(zip(arguments[5::2], arguments[6::2], strict=True))
    assert options["--browser.gatherUsageStats"] == "false"
    assert options["--server.headless"] == "true"
    assert options["--server.address"] == "0.0.0.0" and options["--server.port"] == "8501"
    assert environment("admin")["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] == "false"
    assert "/_stcore/health" in " ".join(SERVICES["admin"]["healthcheck"]["test"])


def test_secrets_are_required_from_env_and_never_shipped() -> None:
    compose_text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    for secret in ("POSTGRES_PASSWORD", "QDRANT_API_KEY", "REDIS_PASSWORD"):
        assert f"${{{secret}:?" in compose_text, f"{secret} must be required, with no default"
        assert example[secret] == "", f".env.example must not carry a value for {secret}"
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert ".env" in ignored, "the build context must never contain .env"


# -- Dockerfile ------------------------------------------------------------------------------------------------


def dockerfile_instructions(keyword: str) -> list[str]:
    joined = DOCKERFILE.replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(f"{keyword} ")]


def test_dockerfile_builds_a_slim_python_312_image_that_stays_offline_as_a_non_root_user() -> None:
    assert dockerfile_instructions("FROM") == ["python:3.12-slim-bookworm"]
    env = " ".join(dockerfile_instructions("ENV"))
    for variable in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS=false"):
        assert variable in env
    user = dockerfile_instructions("USER")[-1].strip()
    assert user not in ("root", "0") and not user.startswith("0:")


def test_dockerfile_installs_cpu_torch_by_default_and_the_server_extras() -> None:
    args = dict(arg.split("=", 1) for arg in dockerfile_instructions("ARG") if "=" in arg)
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert {"postgres", "workers", "ui"} <= set(args["FERRET_EXTRAS"].split(","))
    assert '".[${FERRET_EXTRAS}]"' in DOCKERFILE
    build_args = {name: SERVICES[name]["build"].get("args", {}) for name in FERRET_SERVICES}
    assert all(interpolate(a["TORCH_INDEX_URL"]) == args["TORCH_INDEX_URL"] for a in build_args.values())


# -- the ferret commands the stack runs ------------------------------------------------------------------------


def _invocations() -> list[tuple[str, list[str]]]:
    return [
        (name, arguments)
        for name, service in SERVICES.items()
        if service.get("command")
        for arguments in ferret_invocations(service["command"])
    ]


@pytest.mark.parametrize(("service", "arguments"), _invocations(), ids=lambda value: str(value))
def test_each_ferret_command_in_the_stack_exists_in_the_cli(service: str, arguments: list[str]) -> None:
    from typer.main import get_command

    from ferret.cli.main import app

    command: Any = get_command(app)
    position = 0
    while position < len(arguments) and not arguments[position].startswith("-"):
        name = arguments[position]
        # get_command, not the .commands dict: the top-level group imports a command module only when asked
        sub = command.get_command(typer.Context(command), name) if hasattr(command, "get_command") else None
        if sub is None:
            pytest.fail(f"{service}: `ferret {' '.join(arguments)}`: no command {name!r}")
        command = sub
        position += 1
    if "--help" in arguments:  # every command and group has it
        return
    options = arguments[position:]
    # Parse the options as the CLI would (unknown options, bad values, choices), without running the command.
    command.make_context(f"ferret {' '.join(arguments[:position])}", options)
