"""Contract driver of the web connector: a site per test served by uvicorn (sitemap, robots.txt, ETag, 410)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from connectors.contract.driver import Driver
from connectors.servers.uvicorn_thread import RunningApp
from connectors.servers.uvicorn_thread import serve as serve_app
from connectors.servers.website import Site
from ferret.connectors.web.connector import WebConnector
from ferret_testing import free_port

KIND = "web"
SUPPORTS_RATE_LIMITS = True
MAX_BYTES = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[Callable[[Site], RunningApp]]:
    started: list[RunningApp] = []

    def start(site: Site) -> RunningApp:
        started.append(serve_app(site.app(), free_port()))
        return started[-1]

    try:
        yield start
    finally:
        for app in started:
            app.stop()


class WebDriver(Driver):
    kind = "web"

    def __init__(self, start: Callable[[Site], RunningApp], source: str) -> None:
        super().__init__(source)
        self.site = Site()
        self.app = start(self.site)
        self.acl: dict[str, list[str]] = {f"{self.app.url}/": ["staff"]}

    def connector(self) -> WebConnector:
        return WebConnector(
            name=self.source, start_urls=[f"{self.app.url}/"], acl=self.acl, max_bytes=MAX_BYTES, retry_budget_s=3
        )

    def url(self, key: str) -> str:
        return f"{self.app.url}/kb/{key}"

    def create(self, key: str, title: str, text: str) -> str:
        self.site.put(f"/kb/{key}", title, text)
        return self.url(key)

    def edit(self, key: str, text: str) -> None:
        page = self.site.pages[f"/kb/{key}"]
        self.site.put(f"/kb/{key}", page.title, text)

    def rename(self, key: str, new_key: str) -> str:
        page = self.site.pages[f"/kb/{key}"]
        self.site.remove(f"/kb/{key}", gone=False)
        self.site.redirects[f"/kb/{key}"] = f"/kb/{new_key}"
        self.site.put(f"/kb/{new_key}", page.title, page.body)
        return self.url(new_key)

    def delete(self, key: str) -> None:
        self.site.remove(f"/kb/{key}")

    def set_groups(self, key: str, groups: list[str]) -> None:
        self.acl = {self.url(key): groups, **self.acl}  # a more specific prefix first: only this page changes

    def create_oversized(self, key: str) -> str:
        self.site.put(f"/kb/{key}", "Huge", "glacier " * MAX_BYTES)
        return self.url(key)

    def outage(self, down: bool) -> None:
        self.site.outage = down

    def rate_limit(self, requests: int) -> None:
        self.site.rate_limited = requests


def make_driver(server: Callable[[Site], RunningApp], tmp: Path, source: str) -> WebDriver:
    return WebDriver(server, source)
