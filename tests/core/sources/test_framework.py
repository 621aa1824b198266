"""The sources framework's pure parts: principals and two-layer flattening, source definitions with secret
references, and the HTTP retry helper against a real local server that rate-limits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from connectors.servers.uvicorn_thread import RunningApp
from connectors.servers.uvicorn_thread import serve as serve_app
from connectors.servers.website import Site
from ferret.connectors.retry import RetryBudgetExceededError, RetryPolicy, retry_after_seconds, send_with_retry
from ferret.core.errors import InvalidInputError
from ferret.core.sources.config import load_spec, parse_spec, resolve_secrets
from ferret.core.sources.principals import flatten_layers, group_principal, normalize, user_principal
from ferret_testing import free_port

# -- principals -----------------------------------------------------------------------------------------------------


def test_principals_are_prefixed_and_validated() -> None:
    assert user_principal(" Ann@Corp.Example ") == "user:ann@corp.example"
    assert group_principal("wiki", "eng") == "wiki:group:eng"
    assert normalize(["wiki:group:eng", "public", "wiki:group:eng"]) == ["public", "wiki:group:eng"]
    for bad in ("", " padded", "user:", ":group:eng", "wiki:group:"):
        with pytest.raises(InvalidInputError):
            normalize([bad])
    with pytest.raises(InvalidInputError, match="without ':'"):
        group_principal("a:b", "eng")


def test_two_layers_flatten_to_what_both_allow() -> None:
    members = {"c:group:ops": ["user:ann@x.org", "c:group:oncall"], "c:group:oncall": ["user:bob@x.org"]}
    space = ["c:group:eng", "c:group:ops"]
    page = ["c:group:eng", "user:ann@x.org", "user:bob@x.org", "user:eve@x.org"]

    flat = flatten_layers([space, page], members)

    # eng is in both layers; Ann and Bob pass the space through ops (Bob through nested oncall); Eve does not.
    assert flat == ["c:group:eng", "user:ann@x.org", "user:bob@x.org"]
    assert flatten_layers([["public"], page]) == sorted(page)  # a public layer restricts nothing
    assert flatten_layers([["public"], ["public"]]) == ["public"]
    assert flatten_layers([["c:group:a"], ["c:group:b"]]) == []  # nobody is known to pass both: nobody reads it


# -- source definitions -----------------------------------------------------------------------------------------------


def test_a_definition_keeps_secret_references_and_resolves_them_only_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("file-secret\n", encoding="utf-8")
    (tmp_path / "wiki.yaml").write_text(
        "corpus: intranet\nname: wiki\nkind: web\nschedule_minutes: 30\nconfig:\n"
        "  start_urls: [http://wiki.local/]\n"
        "  headers: {Authorization: {env: WIKI_AUTH}, X-Token: {file: " + str(tmp_path / "token") + "}}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("WIKI_AUTH", "Bearer env-secret")

    spec = load_spec(tmp_path / "wiki.yaml")

    assert spec.config["headers"]["Authorization"] == {"env": "WIKI_AUTH"}
    resolved = resolve_secrets(spec.config)
    assert resolved["headers"] == {"Authorization": "Bearer env-secret", "X-Token": "file-secret"}
    monkeypatch.delenv("WIKI_AUTH")
    with pytest.raises(InvalidInputError, match="WIKI_AUTH, which is not set"):
        resolve_secrets(spec.config)


def test_plain_text_secrets_and_bad_definitions_are_refused() -> None:
    base = {"corpus": "c", "name": "s3-docs", "kind": "s3"}
    with pytest.raises(InvalidInputError, match=r"config.secret_access_key holds a plain-text secret"):
        parse_spec({**base, "config": {"secret_access_key": "hunter2"}})
    with pytest.raises(InvalidInputError, match="Source name 'Bad Name'"):
        parse_spec({**base, "name": "Bad Name"})
    with pytest.raises(InvalidInputError, match="schedule_minutes"):
        parse_spec({**base, "schedule_minutes": 0})
    with pytest.raises(InvalidInputError, match="a mapping"):
        parse_spec(["not", "a", "mapping"])
    assert parse_spec({**base, "config": {"secret_access_key": {"env": "S3_SECRET"}}}).name == "s3-docs"
    sql = {**base, "kind": "sql"}
    with pytest.raises(InvalidInputError, match=r"config.url is a URL with a password in it; write the whole URL"):
        parse_spec({**sql, "config": {"url": "postgresql+psycopg://ferret:hunter2@db.corp:5432/kb"}})
    with pytest.raises(InvalidInputError, match=r"config.remotes\[0\] is a URL with a password"):
        parse_spec({**sql, "config": {"remotes": ["https://bot:ghp_x@git.corp/handbook.git"]}})
    for harmless in ("postgresql+psycopg://ferret@db.corp/kb", "sqlite:////srv/kb.sqlite", "https://wiki/a:b@c"):
        assert parse_spec({**sql, "config": {"url": harmless}}).config["url"] == harmless


# -- retry helper -----------------------------------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == 90.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=5), usegmt=True), now) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


@pytest.fixture
def site() -> Iterator[tuple[Site, RunningApp]]:
    site = Site()
    site.put("/page", "Page", "Hello")
    app = serve_app(site.app(), free_port())
    yield site, app
    app.stop()


def test_rate_limits_are_waited_out_as_the_server_asks(site: tuple[Site, RunningApp]) -> None:
    server, app = site
    server.rate_limited = 2
    waits: list[float] = []
    policy = RetryPolicy(sleep=waits.append)
    with httpx.Client() as client:
        response = send_with_retry(client, client.build_request("GET", f"{app.url}/page"), policy)

    assert response.status_code == 200
    assert waits == [1.0, 1.0] and policy.retries == 2  # Retry-After: 1, twice
    assert [status for _, status in server.requests] == [429, 429, 200]


def test_a_lasting_outage_exhausts_the_budget_and_a_404_is_returned(site: tuple[Site, RunningApp]) -> None:
    server, app = site
    server.outage = True
    waits: list[float] = []
    with httpx.Client() as client:
        with pytest.raises(RetryBudgetExceededError, match=r"HTTP 503\) still failing after 4 attempts in 0 s$"):
            send_with_retry(
                client, client.build_request("GET", f"{app.url}/page"), RetryPolicy(max_attempts=4, sleep=waits.append)
            )
        assert len(waits) == 3 and all(0 <= wait <= 30 for wait in waits)
        server.outage = False
        assert send_with_retry(client, client.build_request("GET", f"{app.url}/missing")).status_code == 404
        server.rate_limited = 5  # Retry-After: 1, more than the budget has left
        with pytest.raises(RetryBudgetExceededError, match=r"the server asks to wait 1 s would pass the retry budget"):
            send_with_retry(client, client.build_request("GET", f"{app.url}/page"), RetryPolicy(budget_s=0.5))
        server.rate_limited = 1
        with pytest.raises(RetryBudgetExceededError, match="budget"):  # asks for longer than the budget allows
            send_with_retry(client, client.build_request("GET", f"{app.url}/page"), RetryPolicy(budget_s=0.5))
