"""Contract driver of the filesystem connector: a folder per test, permissions from the source's ``acl`` map, and
an outage that is a mount dropping after the sync started (its root gone)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from connectors.contract.driver import Driver
from ferret.connectors.filesystem.connector import FilesystemConnector

KIND = "filesystem"
SUPPORTS_RATE_LIMITS = False
MAX_FILE_BYTES = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[Path]:
    yield tmp  # a local folder needs no server


class FilesystemDriver(Driver):
    kind = "filesystem"

    def __init__(self, tmp: Path, source: str) -> None:
        super().__init__(source)
        self.root, self.unmounted = tmp / "share", tmp / "unmounted"
        self.root.mkdir()
        self.groups: dict[str, list[str]] = {}
        self.down = False

    def principal(self, group: str) -> str:
        return group  # an acl map names Ferret's own groups, without a source prefix

    def connector(self) -> FilesystemConnector:
        acl = {**{f"{key}.md": groups for key, groups in self.groups.items()}, "*": ["staff"]}  # first match wins
        connector = FilesystemConnector(name=self.source, root=str(self.root), acl=acl, max_file_bytes=MAX_FILE_BYTES)
        if self.down and self.root.exists():
            self.root.rename(self.unmounted)  # the mount drops once the sync has started
        return connector

    def create(self, key: str, title: str, text: str) -> str:
        (self.root / f"{key}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
        return f"{key}.md"

    def edit(self, key: str, text: str) -> None:
        path = self.root / f"{key}.md"
        title = path.read_text(encoding="utf-8").splitlines()[0]
        path.write_text(f"{title}\n\n{text}\n", encoding="utf-8")

    def rename(self, key: str, new_key: str) -> str:
        (self.root / "archive").mkdir(exist_ok=True)
        (self.root / f"{key}.md").rename(self.root / "archive" / f"{new_key}.md")
        return f"archive/{new_key}.md"

    def delete(self, key: str) -> None:
        (self.root / f"{key}.md").unlink()

    def set_groups(self, key: str, groups: list[str]) -> None:
        self.groups[key] = groups

    def create_oversized(self, key: str) -> str:
        (self.root / f"{key}.md").write_text("glacier " * MAX_FILE_BYTES, encoding="utf-8")
        return f"{key}.md"

    def outage(self, down: bool) -> None:
        self.down = down
        if not down and self.unmounted.exists():
            self.unmounted.rename(self.root)


def make_driver(server: Path, tmp: Path, source: str) -> FilesystemDriver:
    return FilesystemDriver(tmp, source)
