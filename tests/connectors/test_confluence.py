"""The Confluence connector: atlassian-python-api against the stateful Data Center stub (servers/confluence_stub.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from connectors.servers.confluence_stub import PASSWORD, USERNAME, ConfluenceStub
from connectors.servers.uvicorn_thread import serve
from connectors.source_add import added, refused
from ferret.connectors.confluence.connector import ConfluenceConnector
from ferret.connectors.registry import build_connector
from ferret.connectors.retry import RetryBudgetExceededError
from ferret.core.db.models import Document as DocumentRow
from ferret.core.db.source import expand_principals
from ferret.core.errors import InvalidInputError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import FerretSettings
from ferret.core.sources.config import parse_spec
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, GroupMembership
from ferret.core.sources.service import add_source, sync_source
from ferret_testing import free_port


@pytest.fixture
def wiki() -> Iterator[tuple[ConfluenceStub, str]]:
    """ENG is viewable by group eng, HR by hr, PUB anonymously; carol is in both eng and hr."""
    stub = ConfluenceStub()
    stub.add_space("ENG", view_groups=["eng"])
    stub.add_space("HR", view_groups=["hr"])
    stub.add_space("PUB", anonymous=True)
    for group, users in {"eng": ["ann", "bob", "carol"], "hr": ["carol", "dave"]}.items():
        for user in users:
            stub.add_member(group, user)
    running = serve(stub.app, free_port())
    yield stub, running.url
    running.stop()


def connect(url: str, **extra: Any) -> ConfluenceConnector:
    config: dict[str, Any] = {
        "url": url,
        "username": USERNAME,
        "password": PASSWORD,
        "spaces": ["ENG", "HR", "PUB"],
        "name": "wiki",
        "email_domain": "corp.com",
        "overlap_minutes": 0,
        "page_size": 2,
        **extra,
    }
    return ConfluenceConnector(**config)


def run(connector: ConfluenceConnector, cursor: Any = None) -> tuple[list[Document | SkippedItem], Any]:
    items: list[Document | SkippedItem] = []
    last = None
    for item in connector.sync(cursor):
        if isinstance(item, CursorMark):
            last = item.cursor
        else:
            assert isinstance(item, Document | SkippedItem)
            items.append(item)
    return items, last


def documents(items: list[Document | SkippedItem]) -> dict[str, Document]:
    return {item.external_id: item for item in items if isinstance(item, Document)}


def seed(stub: ConfluenceStub) -> dict[str, str]:
    ids = {
        "design": stub.add_page("ENG", "Design", "<p>The queue is <strong>sharded</strong> by tenant.</p>"),
        "salaries": stub.add_page("ENG", "Salaries", "<p>Engineering salary bands.</p>"),
        "leave": stub.add_page("HR", "Leave", "<p>Parental leave is 16 weeks.</p>"),
        "lunch": stub.add_page("PUB", "Lunch", "<p>Lunch is at noon.</p>"),
    }
    ids["bands"] = stub.add_page("ENG", "Bands 2026", "<p>Band E3 starts at 90k.</p>", parent=ids["salaries"])
    stub.restrict(ids["salaries"], groups=["hr"])
    return ids


def test_full_sync_flattens_space_view_and_inherited_restrictions(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)

    items, cursor = run(connect(url))

    docs = documents(items)
    assert set(docs) == set(ids.values())
    assert docs[ids["design"]].text == "The queue is sharded by tenant."
    assert docs[ids["design"]].acl_groups == ["wiki:group:eng"]
    assert docs[ids["leave"]].acl_groups == ["wiki:group:hr"]
    assert docs[ids["lunch"]].acl_groups == ["public"]
    # ENG (eng) ∧ restriction (hr): only carol is in both; the child inherits its parent's restriction
    assert docs[ids["salaries"]].acl_groups == ["user:carol@corp.com"]
    assert docs[ids["bands"]].acl_groups == ["user:carol@corp.com"]
    assert docs[ids["bands"]].metadata["path"] == "Salaries / Bands 2026"
    assert docs[ids["bands"]].metadata["url"] == f"{url}/pages/viewpage.action?pageId={ids['bands']}"
    assert stub.requests.count("/rest/api/search") == 3  # five results, two per page: the next links were followed
    assert cursor["since"] is not None


def test_incremental_sync_picks_up_edits_renames_and_moves_only(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)
    connector = connect(url)
    first, cursor = run(connector)

    again, cursor = run(connector, cursor)
    # only the page at the watermark's own millisecond comes again, unchanged
    assert len(again) <= 1
    assert all(
        item.content_hash == documents(first)[item.external_id].content_hash for item in documents(again).values()
    )

    time.sleep(0.01)
    stub.edit_page(ids["design"], body="<p>The queue is sharded by region.</p>")
    stub.edit_page(ids["leave"], title="Parental leave")
    stub.move_page(ids["design"], ids["salaries"])
    changed, cursor = run(connector, cursor)

    docs = documents(changed)
    assert set(docs) - {ids["bands"]} == {ids["design"], ids["leave"]}  # bands: the old watermark page, unchanged
    assert (
        docs.get(ids["bands"], documents(first)[ids["bands"]]).content_hash
        == documents(first)[ids["bands"]].content_hash
    )
    assert docs[ids["design"]].text == "The queue is sharded by region."
    assert docs[ids["design"]].acl_groups == ["user:carol@corp.com"]  # moved under the restricted page
    assert docs[ids["leave"]].title == "Parental leave"


def test_restriction_edits_reach_the_permission_pass_not_the_sync(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)
    connector = connect(url)
    _, cursor = run(connector)
    time.sleep(0.01)

    stub.restrict(ids["design"], users=["bob"])
    stub.restrict(ids["salaries"])  # lifted: the child is visible to the whole space again
    stub.set_space_view("PUB", groups=["hr"])

    assert set(documents(run(connector, cursor)[0])) <= {ids["bands"]}  # nothing new but the watermark page
    permissions = dict(connector.iter_permissions())
    assert permissions[ids["design"]] == ["user:bob@corp.com"]
    assert permissions[ids["salaries"]] == ["wiki:group:eng"]
    assert permissions[ids["bands"]] == ["wiki:group:eng"]
    assert permissions[ids["lunch"]] == ["wiki:group:hr"]
    assert set(permissions) == set(ids.values())


def test_listing_drops_deleted_pages_and_memberships_name_the_groups_in_use(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)
    connector = connect(url)
    stub.delete_page(ids["lunch"])

    assert sorted(connector.list_external_ids()) == sorted(set(ids.values()) - {ids["lunch"]})
    memberships = set(connector.group_memberships())
    assert GroupMembership(group="wiki:group:hr", member="user:dave@corp.com") in memberships
    assert {membership.group for membership in memberships} == {"wiki:group:eng", "wiki:group:hr"}
    assert len(memberships) == 5
    dict(connector.iter_permissions())  # the engine's order: the memberships then come from this pass
    assert set(connector.group_memberships()) == memberships


def test_interrupted_sync_resumes_from_the_last_page_mark(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)
    connector = connect(url)
    delivered: list[str] = []
    mark = None
    for item in connector.sync(None):
        if isinstance(item, CursorMark):
            mark = item.cursor
        elif isinstance(item, Document):
            delivered.append(item.external_id)
            if len(delivered) == 3:
                break

    rest = documents(run(connector, mark)[0])

    assert set(delivered) | set(rest) == set(ids.values())
    # the second page again (it is the watermark), the third (killed before its mark) and the two not yet seen
    assert len(rest) == len(ids) - 1


def test_rate_limit_is_waited_out_and_a_persistent_outage_fails_clearly(wiki: tuple[ConfluenceStub, str]) -> None:
    stub, url = wiki
    ids = seed(stub)
    stub.throttle_next, stub.retry_after = 2, "1"
    started = time.monotonic()

    assert sorted(connect(url).list_external_ids()) == sorted(ids.values())
    assert time.monotonic() - started >= 2.0  # Retry-After: 1, twice

    stub.fail_next = [503] * 5
    with pytest.raises(RetryBudgetExceededError):
        list(connect(url, retry_attempts=3).list_external_ids())


def test_oversized_page_is_skipped_and_bad_credentials_or_spaces_are_clear_errors(
    wiki: tuple[ConfluenceStub, str],
) -> None:
    stub, url = wiki
    page = stub.add_page("ENG", "Huge", "<p>" + "x" * 500 + "</p>")

    items, _ = run(connect(url, max_page_chars=100))
    assert isinstance(items[0], SkippedItem) and items[0].external_id == page
    assert "max_page_chars" in items[0].reason

    with pytest.raises(InvalidInputError, match="refused 'ferret-bot'"):
        list(connect(url, password="wrong").list_external_ids())
    with pytest.raises(InvalidInputError, match="space 'NOPE' does not exist"):
        list(connect(url, spaces=["NOPE"]).list_external_ids())
    with pytest.raises(InvalidInputError, match="Invalid confluence connector config"):
        ConfluenceConnector(url="wiki.corp", username="u", password="p", spaces=[])
    assert "password" not in connect(url).config_json()


def test_a_configured_source_syncs_with_a_secret_reference_and_reports_memberships(
    wiki: tuple[ConfluenceStub, str], session: Session, settings: FerretSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, url = wiki
    ids = seed(stub)
    monkeypatch.setenv("WIKI_TOKEN", PASSWORD)
    spec = parse_spec(
        {
            "corpus": "intranet",
            "name": "wiki",
            "kind": "confluence",
            "config": {
                "url": url,
                "username": USERNAME,
                "password": {"env": "WIKI_TOKEN"},
                "spaces": ["ENG", "HR"],
                "email_domain": "corp.com",
            },
        }
    )
    source = add_source(session, spec, build_connector)
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        run = sync_source(session, settings, backend, build_connector, source)
    finally:
        backend.close()

    assert source.config["password"] == {"env": "WIKI_TOKEN"}  # the reference is stored, never the token
    assert run.counts["new"] == 4  # the PUB page is outside the configured spaces
    rows = {row.external_id: row for row in session.scalars(select(DocumentRow))}
    assert rows[ids["salaries"]].acl_groups == ["user:carol@corp.com"]
    # carol's API key searches as both groups the wiki reported her in
    assert expand_principals(session, ["user:carol@corp.com"]) == [
        "user:carol@corp.com",
        "wiki:group:eng",
        "wiki:group:hr",
    ]


def test_source_add_refuses_a_wrong_token_or_space_after_one_call_per_space(
    wiki: tuple[ConfluenceStub, str], session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, url = wiki
    config = {"url": url, "username": USERNAME, "password": {"env": "WIKI_TOKEN"}, "spaces": ["ENG", "HR"]}
    monkeypatch.setenv("WIKI_TOKEN", "not-the-token")
    message = refused(
        session,
        "confluence",
        config,
        rf"^Confluence at {url} refused '{USERNAME}' \(HTTP 401\) while reading space ENG; check the username, the "
        r"password or token, and the account's permissions; nothing was stored",
    )
    assert "not-the-token" not in message
    monkeypatch.setenv("WIKI_TOKEN", PASSWORD)
    refused(session, "confluence", {**config, "spaces": ["ENG", "ENGG"]}, r"^Confluence space 'ENGG' does not exist")
    stub.requests.clear()
    added(session, "confluence", config)
    assert stub.requests == ["/rest/api/space/ENG", "/rest/api/space/HR"]
