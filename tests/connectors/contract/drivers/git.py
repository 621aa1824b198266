"""Contract driver of the git connector: a repository per test served by a real ``git daemon``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from connectors.contract.driver import Driver
from connectors.servers.git_daemon import GitDaemon, GitMissingError, git
from ferret.connectors.git.connector import GitConnector
from ferret_testing import free_port, skip_or_fail

KIND = "git"
SUPPORTS_RATE_LIMITS = False
MAX_FILE_BYTES = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[GitDaemon]:
    daemon = GitDaemon(tmp / "repos")
    try:
        daemon.start()
    except GitMissingError as error:
        skip_or_fail(str(error), "`make system-deps` installs git")
    try:
        yield daemon
    finally:
        daemon.stop()


class GitDriver(Driver):
    kind = "git"

    def __init__(self, daemon: GitDaemon, tmp: Path, source: str) -> None:
        super().__init__(source)
        self.daemon, self.cache = daemon, tmp / "cache"
        self.repo = daemon.new_repo(source)
        self.groups = ["staff"]
        self.down = False

    def _commit(self, message: str) -> None:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "--quiet", "-m", message)

    def connector(self) -> GitConnector:
        url = f"git://127.0.0.1:{free_port()}/{self.source}" if self.down else self.daemon.url(self.source)
        return GitConnector(
            name=self.source,
            url=url,
            branch="main",
            groups=self.groups,
            cache_dir=str(self.cache),
            max_file_bytes=MAX_FILE_BYTES,
            timeout_s=20,
        )

    def create(self, key: str, title: str, text: str) -> str:
        (self.repo / "docs").mkdir(exist_ok=True)
        (self.repo / "docs" / f"{key}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
        self._commit(f"add {key}")
        return f"docs/{key}.md"

    def edit(self, key: str, text: str) -> None:
        path = self.repo / "docs" / f"{key}.md"
        title = path.read_text(encoding="utf-8").splitlines()[0]
        path.write_text(f"{title}\n\n{text}\n", encoding="utf-8")
        self._commit(f"edit {key}")

    def rename(self, key: str, new_key: str) -> str:
        (self.repo / "archive").mkdir(exist_ok=True)
        git(self.repo, "mv", f"docs/{key}.md", f"archive/{new_key}.md")
        self._commit(f"move {key}")
        return f"archive/{new_key}.md"

    def delete(self, key: str) -> None:
        git(self.repo, "rm", "--quiet", f"docs/{key}.md")
        self._commit(f"delete {key}")

    def set_groups(self, key: str, groups: list[str]) -> None:
        self.groups = groups  # permissions are per repository: every file of it changes

    def create_oversized(self, key: str) -> str:
        (self.repo / "docs").mkdir(exist_ok=True)
        (self.repo / "docs" / f"{key}.md").write_text("glacier " * MAX_FILE_BYTES, encoding="utf-8")
        self._commit(f"add {key}")
        return f"docs/{key}.md"

    def outage(self, down: bool) -> None:
        self.down = down


def make_driver(server: GitDaemon, tmp: Path, source: str) -> GitDriver:
    return GitDriver(server, tmp, source)
