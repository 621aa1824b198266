"""The git connector's own sentences against a real ``git daemon`` (the contract suite covers syncing itself)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from connectors.contract.drivers.git import serve
from connectors.servers.git_daemon import GitDaemon, git
from connectors.source_add import added, refused
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


def test_source_add_checks_the_repository_and_branch_with_ls_remote(
    daemon: GitDaemon, session: Session, tmp_path: Path
) -> None:
    commit_one(daemon, "handbook")
    config = {"url": daemon.url("handbook"), "branch": "main", "cache_dir": str(tmp_path / "cache")}

    assert added(session, "git", config).config["branch"] == "main"
    assert not (tmp_path / "cache").exists()  # ls-remote only: nothing was cloned


def test_source_add_refuses_a_missing_repository_or_branch(
    daemon: GitDaemon, session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_one(daemon, "handbook")
    cache = str(tmp_path / "cache")
    refused(
        session,
        "git",
        {"url": daemon.url("handbok"), "cache_dir": cache},
        r"^Git source could not read git://127\.0\.0\.1:\d+/handbok with git ls-remote \(fatal: remote error: access "
        r"denied or repository not exported: /handbok\); check url and the credentials it needs; nothing was stored",
    )
    refused(
        session,
        "git",
        {"url": daemon.url("handbook"), "branch": "master", "cache_dir": cache},
        r"^Git repository git://127\.0\.0\.1:\d+/handbook has no branch 'master'; its branches are main; check branch;",
    )
    monkeypatch.setenv("GIT_URL", daemon.url("private"))  # a URL kept as a secret (it would carry a token)
    message = refused(
        session, "git", {"url": {"env": "GIT_URL"}, "cache_dir": cache}, r"could not read \{env: GIT_URL\}"
    )
    assert daemon.url("private") not in message


def commit_one(daemon: GitDaemon, name: str) -> None:
    repo = daemon.new_repo(name)
    (repo / "style.md").write_text("# Style\nFour spaces.\n", encoding="utf-8")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "init")
