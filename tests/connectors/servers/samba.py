"""A real Samba ``smbd`` on 127.0.0.1 for the SMB connector tests (Debian ``samba``; ../shared/CONNECTORS.md).

The share is a folder of the test's temporary directory. File permissions are POSIX modes and owning groups,
which Samba reports as DACLs with ``S-1-22-2-<gid>`` for the group and Everyone (``S-1-1-0``) for "other".
The crawler account is an ``admin users`` member (root on the share), as a backup operator is on Windows.

smbd must run as root and needs Unix accounts for its users; the accounts and groups are system ones named
``ferret-smb-*``, created once and left in place (creating them again is a no-op).
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CRAWLER = "ferret-smb-crawler"
CRAWLER_PASSWORD = "crawler-pw-1"
READER = "ferret-smb-reader"
"""An ordinary account, not an admin of the share: it meets the file permissions a crawler would not."""
READER_PASSWORD = "reader-pw-1"
SHARE = "docs"


def samba_missing() -> str | None:
    """Why no smbd can run here, or ``None``."""
    for binary in ("smbd", "pdbedit"):
        if shutil.which(binary) is None and not Path("/usr/sbin", binary).exists():
            return f"Debian samba is not installed ({binary} not found)"
    if os.geteuid() != 0:
        return "smbd needs root to run on 127.0.0.1 with its own users"
    return None


def ensure_group(name: str) -> int:
    """The gid of system group ``name``, created when missing."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", "--system", "-f", name], check=True, capture_output=True)
        return grp.getgrnam(name).gr_gid


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "-M", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)


@dataclass
class SambaServer:
    """One running smbd; ``share_dir`` is the folder served as ``\\\\127.0.0.1\\docs``."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    groups: dict[str, int] = field(default_factory=dict)

    share_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        # outside pytest's 0700 temporary folders, so the ordinary account can reach the share
        self.share_dir = Path(tempfile.mkdtemp(prefix="ferret-smb-share-"))

    @property
    def config(self) -> Path:
        return self.root / "smb.conf"

    def group_sid(self, group: str) -> str:
        """The SID Samba reports for a Unix group of the share's files."""
        return f"S-1-22-2-{self.groups[group]}"

    def connector_config(self, **extra: object) -> dict[str, object]:
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "share": SHARE,
            "username": CRAWLER,
            "password": CRAWLER_PASSWORD,
            **extra,
        }

    def start(self, groups: list[str]) -> SambaServer:
        for folder in ("private", "lock", "state", "cache", "pid", "ncalrpc", "log"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.share_dir.chmod(0o755)
        self.groups = {group: ensure_group(group) for group in groups}
        self.config.write_text(self._smb_conf(), encoding="utf-8")
        for user, password in ((CRAWLER, CRAWLER_PASSWORD), (READER, READER_PASSWORD)):
            _ensure_user(user)
            subprocess.run(
                ["pdbedit", "-s", str(self.config), "-a", "-t", "-u", user],
                input=f"{password}\n{password}\n".encode(),
                check=True,
                capture_output=True,
            )
        return self.resume()

    def resume(self) -> SambaServer:
        """Start smbd (again) on the same port and wait until it listens."""
        with (self.root / "log" / "stdout.log").open("ab") as log:
            self.process = subprocess.Popen(
                ["smbd", "-s", str(self.config), "--foreground", "--no-process-group", "--debug-stdout"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # smbd signals its whole process group when it stops
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"smbd exited: {(self.root / 'log' / 'stdout.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("smbd did not listen within 15 s")

    def pause(self) -> None:
        """Stop smbd, keeping the share (an outage)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stop(self) -> None:
        self.pause()
        shutil.rmtree(self.share_dir, ignore_errors=True)

    def add_group(self, group: str) -> str:
        """A Unix group for the share's files (created when missing); returns its SID."""
        self.groups[group] = ensure_group(group)
        return self.group_sid(group)

    def write(self, relative: str, text: str, group: str | None = None, mode: int = 0o644) -> Path:
        """Create or overwrite a file in the share; ``group`` owns it (``mode`` 0o640 hides it from others)."""
        path = self.share_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [*path.relative_to(self.share_dir).parents][:-1]:
            (self.share_dir / parent).chmod(0o755)
        path.write_text(text, encoding="utf-8")
        self.permit(relative, group, mode)
        return path

    def permit(self, relative: str, group: str | None, mode: int) -> None:
        """Change who may read a file; the ChangeTime moves, the LastWriteTime does not."""
        path = self.share_dir / relative
        os.chown(path, 0, self.groups[group] if group else 0)
        path.chmod(mode)

    def _smb_conf(self) -> str:
        root = self.root
        return f"""[global]
  smb ports = {self.port}
  interfaces = 127.0.0.1
  bind interfaces only = yes
  disable netbios = yes
  server role = standalone server
  passdb backend = tdbsam:{root}/private/passdb.tdb
  private dir = {root}/private
  lock directory = {root}/lock
  state directory = {root}/state
  cache directory = {root}/cache
  pid directory = {root}/pid
  ncalrpc dir = {root}/ncalrpc
  log file = {root}/log/smbd.log
  map to guest = never
  load printers = no
  printing = bsd
  printcap name = /dev/null
  server min protocol = SMB2_10
[{SHARE}]
  path = {self.share_dir}
  read only = yes
  admin users = {CRAWLER}
"""
