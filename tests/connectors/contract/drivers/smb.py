"""Contract driver of the smb connector: a folder per test on a real Samba smbd (``servers/samba.py``).

A document readable by group ``g`` is a file owned by the Unix group ``ferret-smb-g`` with mode 0640, which Samba
reports as a DACL granting that group's SID (mapped to ``g`` in ``sid_groups``) and the owner, root, whose SID is
left out with ``ignore_sids``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from connectors.contract.driver import Driver
from connectors.servers.samba import SambaServer, samba_missing
from ferret.connectors.smb.connector import SmbConnector
from ferret_testing import free_port, skip_or_fail

KIND = "smb"
SUPPORTS_RATE_LIMITS = False
MAX_FILE_BYTES = 4000
ROOT_SID = "S-1-22-1-0"


@contextmanager
def serve(tmp: Path) -> Iterator[SambaServer]:
    missing = samba_missing()
    if missing:
        skip_or_fail(missing, "`make system-deps` installs samba; run the tests as root")
    server = SambaServer(tmp / "samba", free_port()).start([])
    try:
        yield server
    finally:
        server.stop()


class SmbDriver(Driver):
    kind = "smb"

    def __init__(self, server: SambaServer, source: str) -> None:
        super().__init__(source)
        self.server = server
        self.sid_groups: dict[str, str] = {}

    def connector(self) -> SmbConnector:
        return SmbConnector(
            **self.server.connector_config(
                name=self.source,
                path=self.source,
                sid_groups=dict(self.sid_groups),
                ignore_sids=[ROOT_SID],
                max_file_bytes=MAX_FILE_BYTES,
                overlap_seconds=0,
            )
        )

    def _group(self, group: str) -> str:
        unix = f"ferret-smb-{group}"
        self.sid_groups[self.server.add_group(unix)] = group
        return unix

    def _relative(self, key: str) -> str:
        return f"{self.source}/{key}.txt"

    def create(self, key: str, title: str, text: str) -> str:
        self.server.write(self._relative(key), f"{text}\n", group=self._group("staff"), mode=0o640)
        return f"{key}.txt"

    def edit(self, key: str, text: str) -> None:
        path = self.server.share_dir / self._relative(key)
        path.write_text(f"{text}\n", encoding="utf-8")

    def rename(self, key: str, new_key: str) -> str:
        share = self.server.share_dir
        (share / self._relative(key)).rename(share / self._relative(new_key))
        return f"{new_key}.txt"

    def delete(self, key: str) -> None:
        (self.server.share_dir / self._relative(key)).unlink()

    def set_groups(self, key: str, groups: list[str]) -> None:
        if len(groups) != 1:
            raise NotImplementedError("a POSIX mode names one group; the smb driver sets one")
        self.server.permit(self._relative(key), self._group(groups[0]), 0o640)

    def create_oversized(self, key: str) -> str:
        self.server.write(self._relative(key), "glacier " * MAX_FILE_BYTES, group=self._group("staff"), mode=0o640)
        return f"{key}.txt"

    def outage(self, down: bool) -> None:
        if down:
            self.server.pause()
        else:
            self.server.resume()


def make_driver(server: SambaServer, tmp: Path, source: str) -> SmbDriver:
    return SmbDriver(server, source)
