"""The SharePoint connector: msal and httpx against the stateful Graph stub over HTTPS (servers/graph_stub.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.servers.graph_stub import (
    CLIENT_ID,
    CLIENT_SECRET,
    EVERYONE,
    SITE,
    TENANT,
    GraphStub,
    group,
    self_signed_certificate,
    user,
)
from connectors.servers.uvicorn_thread import serve
from connectors.source_add import added, refused
from ferret.connectors.retry import RetryBudgetExceededError
from ferret.connectors.sharepoint.connector import SharePointConnector
from ferret.core.errors import InvalidInputError
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, Deleted, GroupMembership
from ferret_testing import free_port

Item = Document | SkippedItem | Deleted


@pytest.fixture
def tenant(tmp_path: Path) -> Iterator[tuple[GraphStub, dict[str, Any]]]:
    """Drive ``docs`` is readable by group g-staff (ann, and group g-eng with bob); ``hr`` by dave only."""
    stub = GraphStub()
    stub.add_group("g-eng", "Engineering", ["bob@contoso.com"])
    stub.add_group("g-staff", "Staff", ["ann@contoso.com", "g-eng"])
    stub.add_drive("docs", [group("g-staff", "Staff")])
    stub.add_drive("hr", [user("dave@contoso.com")])
    certificate, key = self_signed_certificate(tmp_path)
    running = serve(stub.app, free_port(), tls=(certificate, key))
    config = {
        "tenant_id": TENANT,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "site_id": SITE,
        "name": "sp",
        "authority_host": running.url,
        "graph_url": f"{running.url}/v1.0",
        "ca_bundle": str(certificate),
    }
    yield stub, config
    running.stop()


def run(connector: SharePointConnector, cursor: Any = None) -> tuple[list[Item], Any]:
    items: list[Item] = []
    last = None
    for item in connector.sync(cursor):
        if isinstance(item, CursorMark):
            last = item.cursor
        else:
            items.append(item)
    return items, last


def documents(items: list[Item]) -> dict[str, Document]:
    return {item.external_id: item for item in items if isinstance(item, Document)}


def seed(stub: GraphStub) -> dict[str, str]:
    return {
        "plan": stub.put("docs", "eng/plan.md", b"# Plan\n\nShip the search box in May.\n"),
        "lunch": stub.put("docs", "lunch.txt", b"Lunch is at noon."),
        "logo": stub.put("docs", "logo.png", b"\x89PNG"),
        "pay": stub.put("hr", "pay.txt", b"Pay day is the 25th."),
    }


def test_full_sync_over_delta_pages_with_item_permissions(tenant: tuple[GraphStub, dict[str, Any]]) -> None:
    stub, config = tenant
    ids = seed(stub)
    stub.share("docs", ids["lunch"], [EVERYONE])
    connector = SharePointConnector(**config)

    items, cursor = run(connector)

    docs = documents(items)
    assert set(docs) == {f"docs:{ids['plan']}", f"docs:{ids['lunch']}", f"hr:{ids['pay']}"}
    plan = docs[f"docs:{ids['plan']}"]
    assert (plan.title, plan.text, plan.metadata["path"]) == (
        "Plan",
        "Plan\nShip the search box in May.",  # Markdown is indexed as the words a reader sees
        "eng/plan.md",
    )
    assert plan.acl_groups == ["sp:group:g-staff"]
    assert docs[f"docs:{ids['lunch']}"].acl_groups == ["public"]  # "Everyone except external users"
    assert docs[f"hr:{ids['pay']}"].acl_groups == ["user:dave@contoso.com"]
    assert [item.external_id for item in items if isinstance(item, SkippedItem)] == [f"docs:{ids['logo']}"]
    assert set(cursor["drives"]) == {"docs", "hr"} and "token=" in cursor["drives"]["docs"]
    assert stub.requests.count("/v1.0/drives/docs/root/delta") == 2  # three items, two per page: the nextLink
    assert stub.token_requests == 1  # msal keeps the token
    assert sorted(connector.list_external_ids()) == sorted(
        f"{d}:{i}"
        for d, i in [("docs", ids["plan"]), ("docs", ids["lunch"]), ("docs", ids["logo"]), ("hr", ids["pay"])]
    )
    memberships = set(connector.group_memberships())
    assert memberships == {
        GroupMembership(group="sp:group:g-staff", member="user:ann@contoso.com"),
        GroupMembership(group="sp:group:g-staff", member="user:bob@contoso.com"),  # through g-eng
    }


def test_delta_link_brings_edits_moves_deletions_and_sharing_changes(tenant: tuple[GraphStub, dict[str, Any]]) -> None:
    stub, config = tenant
    ids = seed(stub)
    connector = SharePointConnector(**config)
    _, cursor = run(connector)

    assert run(connector, cursor)[0] == []  # nothing changed: the delta is empty

    stub.put("docs", "eng/plan.md", b"# Plan\n\nShip the search box in June.\n", item_id=ids["plan"])
    stub.move("docs", ids["lunch"], "facilities/lunch.txt")
    stub.delete("hr", ids["pay"])
    stub.share("docs", ids["logo"], [user("ann@contoso.com")])  # a png: still skipped
    stub.share_link("docs", ids["plan"], "users", [user("erin@contoso.com")])
    items, cursor = run(connector, cursor)

    docs = documents(items)
    assert "June" in docs[f"docs:{ids['plan']}"].text
    assert docs[f"docs:{ids['plan']}"].acl_groups == ["sp:group:g-staff", "user:erin@contoso.com"]
    assert docs[f"docs:{ids['lunch']}"].metadata["path"] == "facilities/lunch.txt"
    assert Deleted(external_id=f"hr:{ids['pay']}") in items
    assert run(connector, cursor)[0] == []


def test_sharing_change_alone_and_broken_inheritance_reach_the_permission_pass(
    tenant: tuple[GraphStub, dict[str, Any]],
) -> None:
    stub, config = tenant
    ids = seed(stub)
    connector = SharePointConnector(**config)
    _, cursor = run(connector)

    stub.share("docs", ids["plan"], [group("g-eng", "Engineering")], only=True)
    stub.share_link("docs", ids["lunch"], "organization")

    docs = documents(run(connector, cursor)[0])
    assert docs[f"docs:{ids['plan']}"].acl_groups == ["sp:group:g-eng"]
    assert docs[f"docs:{ids['lunch']}"].acl_groups == ["public"]
    permissions = dict(connector.iter_permissions())
    assert permissions[f"docs:{ids['plan']}"] == ["sp:group:g-eng"]
    assert permissions[f"hr:{ids['pay']}"] == ["user:dave@contoso.com"]


def test_expired_delta_link_answers_410_and_the_drive_is_enumerated_again(
    tenant: tuple[GraphStub, dict[str, Any]],
) -> None:
    stub, config = tenant
    ids = seed(stub)
    connector = SharePointConnector(**config)
    _, cursor = run(connector)
    stub.put("docs", "new.txt", b"A new file.")
    stub.expire_tokens()

    items, cursor = run(connector, cursor)

    assert connector.resyncs == 2  # both drives' links were refused
    assert len(documents(items)) == 4  # everything again: the engine sees unchanged hashes
    assert run(connector, cursor)[0] == []
    assert ids


def test_interrupted_sync_resumes_on_the_page_it_stopped_at(tenant: tuple[GraphStub, dict[str, Any]]) -> None:
    stub, config = tenant
    for index in range(5):
        stub.put("docs", f"note{index}.txt", f"note number {index}".encode())
    connector = SharePointConnector(**config)
    delivered: list[str] = []
    mark = None
    for item in connector.sync(None):
        if isinstance(item, CursorMark):
            mark = item.cursor
        elif isinstance(item, Document):
            delivered.append(item.external_id)
            if len(delivered) == 3:
                break  # mid-way through the second page

    rest = documents(run(connector, mark)[0])

    assert set(delivered) | set(rest) == {f"docs:01ITEM{n:04d}" for n in range(1, 6)}
    assert len(rest) == 3  # the second page again, then the third


def test_throttling_is_waited_out_and_bad_credentials_are_clear(tenant: tuple[GraphStub, dict[str, Any]]) -> None:
    stub, config = tenant
    seed(stub)
    stub.throttle_next, stub.retry_after = 1, "1"
    started = time.monotonic()

    assert len(list(SharePointConnector(**config).list_external_ids())) == 4
    assert time.monotonic() - started >= 1.0

    stub.throttle_next = 10
    with pytest.raises(RetryBudgetExceededError):
        list(SharePointConnector(**config, retry_attempts=2).list_external_ids())
    stub.throttle_next = 0
    with pytest.raises(InvalidInputError, match="refused the SharePoint app's client credentials"):
        list(SharePointConnector(**{**config, "client_secret": "wrong"}).list_external_ids())
    with pytest.raises(InvalidInputError, match="site 'nope' was not found"):
        list(SharePointConnector(**{**config, "site_id": "nope"}).list_external_ids())
    with pytest.raises(InvalidInputError, match="not libraries of the site"):
        list(SharePointConnector(**config, drives=["Finance"]).list_external_ids())
    with pytest.raises(InvalidInputError, match=r"ca_bundle /nonexistent\.pem cannot be read"):
        SharePointConnector(**{**config, "ca_bundle": "/nonexistent.pem"})
    stub.outage = True  # building a connector needs no network (``ferret source add`` builds one to check it)
    SharePointConnector(**config).close()
    stub.outage = False
    with pytest.raises(InvalidInputError, match="Invalid sharepoint connector config"):
        SharePointConnector(**{**config, "authority_host": "http://login.example"})
    assert "client_secret" not in SharePointConnector(**config).config_json()


def test_source_add_refuses_a_wrong_secret_site_or_library_and_stores_a_good_one(
    tenant: tuple[GraphStub, dict[str, Any]], session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub, connection = tenant
    config = {**connection, "client_secret": {"env": "SP_SECRET"}}
    config.pop("name")
    monkeypatch.setenv("SP_SECRET", "not-the-secret")
    message = refused(
        session,
        "sharepoint",
        config,
        r"^The identity platform refused the SharePoint app's client credentials \(.*\); check tenant_id, client_id",
    )
    assert "not-the-secret" not in message
    monkeypatch.setenv("SP_SECRET", CLIENT_SECRET)
    refused(session, "sharepoint", {**config, "site_id": "nosuch"}, r"^SharePoint site 'nosuch' was not found")
    refused(session, "sharepoint", {**config, "drives": ["dcos"]}, r"^SharePoint drives \['dcos'\] are not libraries")
    assert added(session, "sharepoint", {**config, "drives": ["docs"]}).config["drives"] == ["docs"]
