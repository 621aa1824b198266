"""The git connector's own sentences against a real ``git daemon`` (the contract suite covers syncing itself)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.contract.drivers.git import serve
from connectors.servers.git_daemon import GitDaemon, git
from ferret.connectors.git.connector import GitConnector
from ferret.core.errors import InvalidInputError


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[GitDaemon]:
    with serve(tmp_path) as server:  # the contract suite's: skipped or failed as it is when git is missing
        yield server


def test_an_unknown_branch_is_a_sentence_naming_the_branches_there(daemon: GitDaemon, tmp_path: Path) -> None:
    repo = daemon.new_repo("handbook")
    (repo / "style.md").write_text("# Style\nFour spaces.\n", encoding="utf-8")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "init")
    connector = GitConnector(name="docs", url=daemon.url("handbook"), branch="master", cache_dir=str(tmp_path / "c"))

    with pytest.raises(InvalidInputError, match=r"^Branch 'master' is not in git://127\.0\.0\.1:\d+/handbook; its "):
        list(connector.list_external_ids())
    with pytest.raises(InvalidInputError, match=r"its branches are main; check branch\.$"):
        list(connector.sync(None))
