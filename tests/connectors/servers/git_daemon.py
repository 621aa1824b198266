"""A real Git server for the git connector tests: ``git daemon`` on 127.0.0.1 serving repositories of a folder.

Repositories are ordinary working copies under ``root``; the test commits into them with the git CLI and the
connector fetches them over ``git://``. A missing ``git`` binary raises ``GitMissingError``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ferret_testing import free_port


class GitMissingError(RuntimeError):
    """No ``git`` binary: install the Debian package ``git``."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
            "HOME": str(repo),
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        },
    )
    return done.stdout


@dataclass
class GitDaemon:
    root: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> GitDaemon:
        if shutil.which("git") is None:
            raise GitMissingError("The `git` binary is not installed; `make system-deps` installs it.")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                "git",
                "daemon",
                "--reuseaddr",
                f"--base-path={self.root}",
                "--export-all",
                "--listen=127.0.0.1",
                f"--port={self.port}",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("git daemon did not listen in time")

    def new_repo(self, name: str) -> Path:
        repo = self.root / name
        repo.mkdir(parents=True)
        git(repo, "init", "--quiet", "--initial-branch=main")
        return repo

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
