"""Key management is narrower than admin (issue 11, item 2): an admin key grants, lists and revokes only keys within
its own groups; an owner key grants any group. Every key change and index promotion is in the audit trail, visible
through the API and ``ferret audit list``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from ferret.cli.main import app as cli_app
from ferret.core.settings import get_settings

Auth = Callable[[str], dict[str, str]]


def create(client: TestClient, auth: Auth, by: str, name: str, scopes: list[str], groups: list[str]) -> Any:
    body = {"name": name, "scopes": scopes, "acl_groups": groups}
    return client.post("/v1/api-keys", json=body, headers=auth(by))


def test_an_admin_key_cannot_mint_a_key_for_another_group(
    client: TestClient, auth: Auth, visible: dict[str, set[str]]
) -> None:
    # The reproduction: an admin key without group b creates a search key for group b and reads b's documents.
    response = create(client, auth, "admin", "into-b", ["search"], ["b"])
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "This key cannot create API key 'into-b': it holds group(s) b that this key does not; "
        "use an owner key or `ferret apikey` on the server."
    )
    response = create(client, auth, "admin-a", "into-ab", ["search"], ["a", "b"])
    assert response.status_code == 403
    assert create(client, auth, "admin-a", "crown", ["owner"], ["a"]).status_code == 403
    # Within its groups an admin key manages keys as before.
    made = create(client, auth, "admin-a", "team-a-portal", ["search"], ["a"])
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['key']}"}
    hits = client.post("/v1/corpora/kb/search", json={"query": "volcano", "k": 20}, headers=headers).json()
    assert {hit["external_id"] for hit in hits["results"]} == visible["a"]
    listed = {key["name"] for key in client.get("/v1/api-keys", headers=auth("admin-a")).json()["keys"]}
    assert "team-a-portal" in listed and "search-a" in listed
    assert not listed & {"search-b", "owner", "ingest-b"}
    assert client.delete("/v1/api-keys/search-b", headers=auth("admin-a")).status_code == 403
    assert client.delete("/v1/api-keys/owner", headers=auth("admin-a")).status_code == 403
    assert client.delete("/v1/api-keys/team-a-portal", headers=auth("admin-a")).status_code == 200


def test_an_owner_key_grants_any_group_and_implies_admin(client: TestClient, auth: Auth) -> None:
    response = create(client, auth, "owner", "portal-b", ["search"], ["b"])
    assert response.status_code == 201, response.text
    assert client.get("/v1/corpora", headers=auth("owner")).status_code == 200
    assert create(client, auth, "owner", "second-owner", ["owner"], []).status_code == 201


def test_the_audit_trail_names_who_did_what(client: TestClient, auth: Auth) -> None:
    assert create(client, auth, "admin-a", "audited-a", ["search"], ["a"]).status_code == 201
    assert client.delete("/v1/api-keys/audited-a", headers=auth("admin-a")).status_code == 200
    assert client.post("/v1/corpora/live/index-versions/rollback", headers=auth("admin")).status_code == 200
    events = client.get("/v1/audit-events", params={"limit": 5}, headers=auth("admin")).json()["events"]
    assert [(e["actor"], e["action"], e["target"]) for e in events[:3]] == [
        ("key:admin", "index.rollback", "live"),  # one event: a rollback is not also recorded as a promotion
        ("key:admin-a", "apikey.revoke", "audited-a"),
        ("key:admin-a", "apikey.create", "audited-a"),
    ]
    assert events[2]["detail"] == {"scopes": ["search"], "acl_groups": ["a"]}
    only = client.get("/v1/audit-events", params={"action": "apikey.revoke"}, headers=auth("admin")).json()
    assert {e["action"] for e in only["events"]} == {"apikey.revoke"}
    assert client.get("/v1/audit-events", headers=auth("search-a")).status_code == 403
    # back as it was: rollback walks back through the activation history, so the way back is a promote
    assert client.post("/v1/corpora/live/index-versions/2/promote", headers=auth("admin")).status_code == 200


def test_ferret_audit_list_shows_the_trail(installation: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRET_HOME", str(installation.settings.home))
    monkeypatch.setenv("COLUMNS", "200")
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        made = runner.invoke(cli_app, ["apikey", "create", "--name", "cli-made", "--scope", "search", "-g", "zeta"])
        assert made.exit_code == 0, made.output
        shown = runner.invoke(cli_app, ["audit", "list", "--action", "apikey.create", "-n", "1"])
    finally:
        get_settings.cache_clear()
    assert shown.exit_code == 0, shown.output
    assert "apikey.create" in shown.output and "cli-made" in shown.output and "cli:" in shown.output
