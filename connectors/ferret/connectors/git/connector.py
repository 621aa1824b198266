"""Text files of a Git repository (docs as code) as documents, synced with the ``git`` CLI.

The repository is mirrored into ``cache_dir`` (``git clone --mirror``, then ``git fetch``), so any URL git speaks
works (``git://`` from ``git daemon``, https, ssh, a path). The cursor is a commit:

- ``{"commit": C}``: every file of C has been delivered; the next sync diffs C..HEAD (``git diff
  --no-renames``: a rename is a deletion and a new document) and reads only the changed files.
- ``{"base": B, "commit": C, "after": path}``: a sync from B to C stopped after ``path`` (files go in path order,
  with a mark after each); the resumed sync continues the same B..C walk after ``path`` before moving on.

A base that is no longer an ancestor (a force push) falls back to a full walk. Deletions also come from the tree
listing of HEAD. Permissions are per repository (``groups``), checked by a permission pass so a config change
re-permissions every file without re-embedding.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferret.connectors.access import reason, redact_url
from ferret.connectors.filesystem.parsers import SUPPORTED_EXTENSIONS, UnreadableFileError, parse_file
from ferret.connectors.principal_map import principals_for
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, Deleted, IncrementalConnector, PermissionPass, SyncItem

_CHECK_TIMEOUT_S = 30.0
"""Longest ``check_access`` waits for the remote (a sync waits ``timeout_s``)."""
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_INCLUDE = ["*.md", "*.markdown", "*.txt", "*.rst", "*.html", "*.htm"]


class GitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    branch: str = "HEAD"
    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    groups: list[str] = Field(default_factory=list)
    cache_dir: str = "~/.cache/ferret/git"
    max_file_bytes: int = Field(default=5_000_000, gt=0)
    timeout_s: float = Field(default=300.0, gt=0)
    name: str | None = None


class GitError(Exception):
    """A git command failed (unreachable remote, unknown branch); the sync fails and deletes nothing."""


class GitConnector(IncrementalConnector, SlimConnector, PermissionPass):
    """Example:
    >>> connector = GitConnector(url="git://git.corp.example/handbook.git", groups=["staff"])
    """

    kind = "git"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = GitConfig(**config)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in error.errors())
            raise InvalidInputError(f"Invalid git connector config ({problems}).") from None
        digest = hashlib.sha256(self.settings.url.encode()).hexdigest()[:16]
        self.mirror = Path(self.settings.cache_dir).expanduser() / f"{digest}.git"
        self._fetched = False
        self.principals = principals_for(self.source_name, self.settings.groups)

    # -- git plumbing -------------------------------------------------------------------------------------------
    def _git(self, *args: str, input_bytes: bytes | None = None) -> bytes:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.mirror), *args],
                input=input_bytes,
                capture_output=True,
                timeout=self.settings.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took longer than {self.settings.timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise GitError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[:300]}")
        return done.stdout

    def _fetch(self) -> None:
        if self._fetched:
            return
        if not (self.mirror / "HEAD").exists():
            self.mirror.parent.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["git", "clone", "--quiet", "--mirror", self.settings.url, str(self.mirror)],
                capture_output=True,
                timeout=self.settings.timeout_s,
                check=False,
            )
            if done.returncode != 0:
                raise GitError(f"git clone of {self.settings.url} failed: {done.stderr.decode(errors='replace')[:300]}")
        else:
            self._git("fetch", "--quiet", "--prune", "origin", "+refs/*:refs/*")
        self._fetched = True

    def check_access(self) -> None:
        """``git ls-remote`` of the URL and branch (a second one lists the branches when it is missing); never a
        prompt for credentials, at most ``_CHECK_TIMEOUT_S``."""
        url, branch = redact_url(self.settings.url), self.settings.branch
        pattern = [] if _COMMIT.match(branch) else [branch]  # a commit id is no ref name: only the URL is checked
        done = self._ls_remote(*pattern)
        if done.returncode not in (0, 2) or (done.returncode == 2 and not pattern):
            said = " ".join(done.stderr.decode(errors="replace").split())
            why = reason(Exception(said)) if said else f"exit status {done.returncode}"
            raise InvalidInputError(
                f"Git source could not read {url} with git ls-remote ({why}); check url and the credentials it needs."
            )
        if done.returncode == 2:
            heads = self._ls_remote(options=["--heads"]).stdout.decode(errors="replace").split()[1::2]
            names = [head.removeprefix("refs/heads/") for head in heads]
            if not names:
                raise InvalidInputError(f"Git repository {url} has no commits yet; push one, or check url.")
            raise InvalidInputError(
                f"Git repository {url} has no branch {branch!r}; its branches are {', '.join(names[:10])}; "
                "check branch."
            )

    def _ls_remote(self, *patterns: str, options: list[str] | None = None) -> subprocess.CompletedProcess[bytes]:
        """``git ls-remote --exit-code OPTIONS URL PATTERNS`` without any prompt (exit 2: nothing matched)."""
        environment = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "ssh -o BatchMode=yes"}
        timeout = min(self.settings.timeout_s, _CHECK_TIMEOUT_S)
        try:
            return subprocess.run(
                ["git", "ls-remote", "--exit-code", *(options or []), self.settings.url, *patterns],
                capture_output=True,
                timeout=timeout,
                check=False,
                env=environment,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise InvalidInputError(
                f"Git source {redact_url(self.settings.url)} did not answer git ls-remote within {timeout:.0f} s; "
                "check url and that the server is up."
            ) from None

    def _head(self) -> str:
        try:
            return self._git("rev-parse", "--verify", f"{self.settings.branch}^{{commit}}").decode().strip()
        except GitError:
            branches = self._git("for-each-ref", "--format=%(refname:short)", "refs/heads").decode().split()
            raise InvalidInputError(
                f"Branch {self.settings.branch!r} is not in {self.settings.url}; its branches are "
                f"{', '.join(branches[:10]) or 'none'}{', ...' if len(branches) > 10 else ''}; check branch."
            ) from None

    def _is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self._git("merge-base", "--is-ancestor", older, newer)
        except GitError:
            return False
        return True

    def _tree(self, commit: str) -> dict[str, tuple[str, int]]:
        """path -> (blob sha, size) of the included files of a commit."""
        files: dict[str, tuple[str, int]] = {}
        for entry in self._git("ls-tree", "-r", "-z", "--long", commit).split(b"\0"):
            if not entry:
                continue
            meta, _, path = entry.decode("utf-8", errors="surrogateescape").partition("\t")
            _mode, kind, sha, size = meta.split()
            if kind == "blob" and self._included(path):
                files[path] = (sha, int(size) if size.isdigit() else 0)
        return files

    def _included(self, path: str) -> bool:
        return any(
            fnmatch(path, pattern) or fnmatch(PurePosixPath(path).name, pattern) for pattern in self.settings.include
        )

    def _changes(self, base: str, commit: str) -> list[tuple[str, str | None]]:
        """``(path, None)`` for a deleted path, ``(path, path)`` for an added or modified one, in path order."""
        changes: dict[str, str | None] = {}
        fields = self._git("diff", "--name-status", "-z", "--no-renames", base, commit).split(b"\0")
        index = 0
        while index < len(fields) - 1:
            status, path = fields[index].decode(), fields[index + 1].decode("utf-8", errors="surrogateescape")
            index += 2
            if self._included(path):
                changes[path] = None if status.startswith("D") else path
        return sorted(changes.items())

    # -- the port -----------------------------------------------------------------------------------------------
    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        self._fetch()
        cursor = dict(cursor or {})
        if "after" in cursor:  # finish the interrupted walk first
            yield from self._walk(cursor.get("base"), cursor["commit"], cursor["after"])
            cursor = {"commit": cursor["commit"]}
        head = self._head()
        base = cursor.get("commit")
        if base == head:
            yield CursorMark(cursor={"commit": head})
            return
        if base is not None and not self._is_ancestor(base, head):
            base = None  # history rewritten: walk the whole tree; pruning removes what is gone
        yield from self._walk(base, head, None)

    def _walk(self, base: str | None, commit: str, after: str | None) -> Iterator[SyncItem]:
        tree = self._tree(commit)
        if base is None:
            changes: list[tuple[str, str | None]] = [(path, path) for path in sorted(tree)]
        else:
            changes = self._changes(base, commit)
        for path, present in changes:
            if after is not None and path <= after:
                continue
            if present is None or path not in tree:
                yield Deleted(external_id=path)
            else:
                yield self._document(path, *tree[path])
            yield CursorMark(cursor={"base": base, "commit": commit, "after": path})
        yield CursorMark(cursor={"commit": commit})

    def _document(self, path: str, sha: str, size: int) -> Document | SkippedItem:
        if size > self.settings.max_file_bytes:
            return SkippedItem(
                external_id=path,
                reason=f"file is {size:,} bytes, over max_file_bytes {self.settings.max_file_bytes:,}; raise it",
            )
        data = self._git("cat-file", "blob", sha)
        extension = PurePosixPath(path).suffix.lower()
        if extension not in SUPPORTED_EXTENSIONS:
            extension = ".txt"
        if b"\0" in data[:8192]:
            return SkippedItem(external_id=path, reason="binary file (NUL bytes), not text")
        try:
            parsed = parse_file(data, extension)
        except UnreadableFileError as error:
            return SkippedItem(external_id=path, reason=str(error))
        return Document(
            external_id=path,
            title=parsed.title or PurePosixPath(path).stem,
            text=parsed.text,
            source=self.source_name,
            metadata={"path": path, "repository": self.settings.url},
            acl_groups=self.principals,
        )

    def list_external_ids(self) -> Iterator[str]:
        self._fetch()
        yield from sorted(self._tree(self._head()))

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        for path in self.list_external_ids():
            yield path, self.principals
