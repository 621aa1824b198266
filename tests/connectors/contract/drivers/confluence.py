"""Contract driver of the confluence connector: a space per test on the stateful Data Center stub.

The space grants VIEW to every group the driver uses, and each page carries a read restriction naming its groups,
so the flattened principals of a page are exactly its groups. A rename changes the page's title: Confluence page
ids are stable, so the document keeps its external id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from connectors.contract.driver import Driver
from connectors.servers.confluence_stub import PASSWORD, USERNAME, ConfluenceStub
from connectors.servers.uvicorn_thread import RunningApp
from connectors.servers.uvicorn_thread import serve as serve_app
from ferret.connectors.confluence.connector import ConfluenceConnector
from ferret_testing import free_port

KIND = "confluence"
SUPPORTS_RATE_LIMITS = True
MAX_PAGE_CHARS = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[tuple[ConfluenceStub, RunningApp]]:
    stub = ConfluenceStub()
    running = serve_app(stub.app, free_port())
    try:
        yield stub, running
    finally:
        running.stop()


class ConfluenceDriver(Driver):
    kind = "confluence"

    def __init__(self, server: tuple[ConfluenceStub, RunningApp], source: str) -> None:
        super().__init__(source)
        self.stub, self.running = server
        self.space = source.upper()
        self.view: list[str] = ["staff"]
        self.stub.add_space(self.space, view_groups=self.view)
        self.pages: dict[str, str] = {}

    def connector(self) -> ConfluenceConnector:
        return ConfluenceConnector(
            url=self.running.url,
            username=USERNAME,
            password=PASSWORD,
            spaces=[self.space],
            name=self.source,
            overlap_minutes=0,
            max_page_chars=MAX_PAGE_CHARS,
            retry_attempts=3,
            retry_budget_s=5,
        )

    def create(self, key: str, title: str, text: str) -> str:
        self.pages[key] = self.stub.add_page(self.space, title, f"<p>{text}</p>")
        self.stub.restrict(self.pages[key], groups=["staff"])
        return self.pages[key]

    def edit(self, key: str, text: str) -> None:
        self.stub.edit_page(self.pages[key], body=f"<p>{text}</p>")

    def rename(self, key: str, new_key: str) -> str:
        self.pages[new_key] = self.pages.pop(key)
        self.stub.edit_page(self.pages[new_key], title=new_key.replace("-", " ").title())
        return self.pages[new_key]

    def delete(self, key: str) -> None:
        self.stub.delete_page(self.pages.pop(key))

    def set_groups(self, key: str, groups: list[str]) -> None:
        self.view = sorted({*self.view, *groups})
        self.stub.set_space_view(self.space, self.view)
        self.stub.restrict(self.pages[key], groups=groups)

    def create_oversized(self, key: str) -> str:
        return self.create(key, "Huge", "glacier " * MAX_PAGE_CHARS)

    def outage(self, down: bool) -> None:
        self.stub.outage = down

    def rate_limit(self, requests: int) -> None:
        self.stub.retry_after = "0"
        self.stub.throttle_next = requests


def make_driver(server: tuple[ConfluenceStub, RunningApp], tmp: Path, source: str) -> ConfluenceDriver:
    return ConfluenceDriver(server, source)
