"""Contract driver of the sharepoint connector: a document library per test on the stateful Graph stub (HTTPS).

Every library grants read to the Entra group ``staff``; ``set_groups`` breaks the item's inheritance and grants
the groups named. A rename moves the item: Graph item ids are stable, so the document keeps its external id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from connectors.contract.driver import Driver
from connectors.servers.graph_stub import (
    CLIENT_ID,
    CLIENT_SECRET,
    SITE,
    TENANT,
    GraphStub,
    group,
    self_signed_certificate,
)
from connectors.servers.uvicorn_thread import serve as serve_app
from ferret.connectors.sharepoint.connector import SharePointConnector
from ferret_testing import free_port

KIND = "sharepoint"
SUPPORTS_RATE_LIMITS = True
MAX_FILE_BYTES = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[tuple[GraphStub, dict[str, Any]]]:
    stub = GraphStub()
    certificate, key = self_signed_certificate(tmp)
    running = serve_app(stub.app, free_port(), tls=(certificate, key))
    config = {
        "tenant_id": TENANT,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "site_id": SITE,
        "authority_host": running.url,
        "graph_url": f"{running.url}/v1.0",
        "ca_bundle": str(certificate),
        "max_file_bytes": MAX_FILE_BYTES,
        "retry_attempts": 3,
        "retry_budget_s": 5,
    }
    try:
        yield stub, config
    finally:
        running.stop()


class SharePointDriver(Driver):
    kind = "sharepoint"

    def __init__(self, server: tuple[GraphStub, dict[str, Any]], source: str) -> None:
        super().__init__(source)
        self.stub, self.config = server
        self.drive = f"drive-{source}"
        self.stub.add_drive(self.drive, [group("staff", "Staff")])
        self.items: dict[str, str] = {}

    def connector(self) -> SharePointConnector:
        return SharePointConnector(**self.config, name=self.source, drives=[self.drive])

    def create(self, key: str, title: str, text: str) -> str:
        self.items[key] = self.stub.put(self.drive, f"notes/{key}.md", f"# {title}\n\n{text}\n".encode())
        return f"{self.drive}:{self.items[key]}"

    def edit(self, key: str, text: str) -> None:
        self.stub.put(self.drive, f"notes/{key}.md", f"{text}\n".encode(), item_id=self.items[key])

    def rename(self, key: str, new_key: str) -> str:
        self.items[new_key] = self.items.pop(key)
        self.stub.move(self.drive, self.items[new_key], f"archive/{new_key}.md")
        return f"{self.drive}:{self.items[new_key]}"

    def delete(self, key: str) -> None:
        self.stub.delete(self.drive, self.items.pop(key))

    def set_groups(self, key: str, groups: list[str]) -> None:
        self.stub.share(self.drive, self.items[key], [group(name, name.title()) for name in groups], only=True)

    def create_oversized(self, key: str) -> str:
        self.items[key] = self.stub.put(self.drive, f"notes/{key}.txt", b"glacier " * MAX_FILE_BYTES)
        return f"{self.drive}:{self.items[key]}"

    def outage(self, down: bool) -> None:
        self.stub.outage = down

    def rate_limit(self, requests: int) -> None:
        self.stub.retry_after = "0"
        self.stub.throttle_next = requests


def make_driver(server: tuple[GraphStub, dict[str, Any]], tmp: Path, source: str) -> SharePointDriver:
    return SharePointDriver(server, source)
