"""The web connector's change detection against a real uvicorn site: a sitemap ``lastmod`` is coarse, so an
unchanged one only skips a page once the stored copy is newer than it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.servers.uvicorn_thread import RunningApp, serve
from connectors.servers.website import Site
from connectors.source_add import added, refused
from ferret.connectors.web.connector import WebConnector
from ferret.core.sources.documents import Document
from ferret.core.sources.incremental import CursorMark
from ferret_testing import free_port


@pytest.fixture
def site() -> Iterator[tuple[Site, RunningApp]]:
    site = Site()
    app = serve(site.app(), free_port())
    try:
        yield site, app
    finally:
        app.stop()


def _sync(app: RunningApp, cursor: Any) -> tuple[list[Document], Any]:
    connector = WebConnector(name="intranet", start_urls=[f"{app.url}/"], retry_budget_s=3)
    documents: list[Document] = []
    for item in connector.sync(cursor):
        if isinstance(item, Document):
            documents.append(item)
        elif isinstance(item, CursorMark):
            cursor = item.cursor
    return documents, cursor


def _page_requests(site: Site) -> list[tuple[str, int]]:
    return [request for request in site.requests if request[0].startswith("/kb/")]


def test_an_edit_within_the_lastmod_second_is_still_seen(site: tuple[Site, RunningApp]) -> None:
    web, app = site
    # Both versions carry one lastmod that the first fetch falls inside of, as two edits within one second (or one
    # day, for a date-only lastmod) do. A fixed stamp ahead of the clock makes that certain, whatever the timing.
    stamp = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    web.put("/kb/fjords", "Fjords", "Fjords are long narrow inlets.")
    web.pages["/kb/fjords"].modified = stamp
    _, cursor = _sync(app, None)
    web.put("/kb/fjords", "Fjords", "Kilimanjaro is a dormant volcano in Tanzania.")
    web.pages["/kb/fjords"].modified = stamp

    documents, _ = _sync(app, cursor)

    assert len(documents) == 1 and "Kilimanjaro" in documents[0].text


def test_a_page_fetched_after_its_lastmod_is_not_asked_for_again(site: tuple[Site, RunningApp]) -> None:
    web, app = site
    web.put("/kb/fjords", "Fjords", "Fjords are long narrow inlets.")
    web.pages["/kb/fjords"].modified = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    _, cursor = _sync(app, None)
    asked = len(_page_requests(web))

    documents, _ = _sync(app, cursor)

    assert documents == []
    assert len(_page_requests(web)) == asked  # the sitemap answered for the page: no request, not even a 304


def test_source_add_fetches_the_start_page_before_storing(site: tuple[Site, RunningApp], session: Session) -> None:
    pages, app = site
    pages.put("/handbook/", "Handbook", "Welcome to the handbook.")

    assert added(session, "web", {"start_urls": [f"{app.url}/handbook/"]}).kind == "web"
    assert [path for path, _status in pages.requests] == ["/robots.txt", "/handbook/"]  # two requests, no crawl


def test_source_add_refuses_a_missing_page_a_disallowed_one_and_a_site_that_is_down(
    site: tuple[Site, RunningApp], session: Session
) -> None:
    pages, app = site
    pages.put("/private/pay.html", "Pay", "Salary bands.")
    refused(
        session,
        "web",
        {"start_urls": [f"{app.url}/handbok/"]},
        r"^Web source start URL http://127\.0\.0\.1:\d+/handbok/ answered HTTP 404; check start_urls; nothing was",
    )
    refused(
        session,
        "web",
        {"start_urls": [f"{app.url}/private/pay.html"]},
        r"start URL \S+/private/pay\.html is disallowed by its robots\.txt for 'FerretBot/1\.0'; start elsewhere",
    )
    pages.outage = True
    refused(session, "web", {"start_urls": [f"{app.url}/"]}, r"could not be fetched \(.*HTTP 503.*\); check start_u")
