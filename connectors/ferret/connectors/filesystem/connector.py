"""A folder of files as a source: text, Markdown, HTML, PDF and Word documents, walked recursively.

Read two ways: ``ferret ingest --path`` loads it (``LoadConnector``, ``PollConnector``), and ``ferret source add``
keeps it as a scheduled source (``IncrementalConnector``): a local disk, or a share mounted over NFS or SMB.

Incremental sync: a file is read again when its modification or status-change time (``st_mtime``, ``st_ctime``) is
after the previous sync's start minus ``overlap_seconds``. The status-change time is what catches a file moved or
copied in with an old modification time (``mv``, ``cp -p``, ``rsync -t``): the kernel sets it on the rename or on
the new inode. Deletions come from the complete walk of ``list_external_ids``; an edit of the config's ``acl`` map is
applied by the permission pass (``iter_permissions``) without reading a file.

Cursor: ``{"since": <epoch s or null>, "started": <epoch s>, "after": <last path done or null>}``. A mark is set
after every file in walk order, so an interrupted sync resumes after the last file it finished and keeps the
``since`` and ``started`` it began with.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferret.connectors.filesystem.parsers import (
    SUPPORTED_EXTENSIONS,
    UnreadableFileError,
    parse_file,
    unsupported_reason,
)
from ferret.core.acl import PUBLIC_GROUP
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import (
    ConnectorOutput,
    LoadConnector,
    PermissionConnector,
    PollConnector,
    SlimConnector,
)
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    IncompleteListingError,
    IncrementalConnector,
    PermissionPass,
    SyncItem,
)

_MAX_EXTERNAL_ID_CHARS = 1024
"""Longest relative path a document id can hold: the ``max_length`` of ``Document.external_id``."""


class FilesystemConfig(BaseModel):
    """The connector's config as stored on the source row; unknown keys are refused so typos surface."""

    model_config = ConfigDict(extra="forbid")

    root: Path
    name: str | None = None
    max_file_bytes: int = Field(default=50_000_000, gt=0)
    acl: dict[str, list[str]] = Field(default_factory=dict)
    include: list[str] = Field(default_factory=list)
    overlap_seconds: float = Field(default=60.0, ge=0)
    """How far before the previous sync's start a change still counts: the clock of a mounted share's server may
    run behind this machine's (raise it for such a share)."""


class FilesystemConnector(
    LoadConnector, PollConnector, SlimConnector, PermissionConnector, IncrementalConnector, PermissionPass
):
    """Index every supported file under ``root``; hidden files and folders (leading dot) are left out, and so are
    symbolic links to files inside ``root`` (the file is indexed under its own path, once) and links to folders
    (not followed). A full load lists each of them as skipped with its reason, so nothing is left out silently.

    Glob patterns in ``include`` and ``acl`` are matched with ``fnmatch`` against the POSIX path relative to
    ``root``, where ``*`` also crosses folders: ``"hr/*"`` covers everything below ``hr/``. In ``acl`` the
    first matching pattern wins; files matching none are public.

    Example:
        >>> connector = FilesystemConnector(root="/srv/docs", acl={"hr/*": ["hr"]})
        >>> [item.external_id for item in connector.load_from_source()]
        ['handbook.md', 'hr/leave-policy.docx', ...]
        >>> connector.acl_groups("hr/leave-policy.docx")
        ['hr']
    """

    kind = "filesystem"
    scoped_groups = False  # the acl map names Ferret's groups as searched: `--group hr`

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = FilesystemConfig(**config)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'config'}: {problem['msg']}"
                for problem in error.errors()
            )
            keys = ", ".join(FilesystemConfig.model_fields)
            raise InvalidInputError(f"Invalid filesystem connector config ({problems}); the keys are {keys}.") from None
        self.root = self.settings.root.expanduser().resolve()
        if not self.root.is_dir():
            what = "is not a folder" if self.root.exists() else "does not exist"
            raise InvalidInputError(f"Filesystem source root {self.root} {what}; point 'root' at an existing folder.")

    def check_access(self) -> None:
        """The root exists (checked when built) and its entries can be listed by this process's user."""
        try:
            with os.scandir(self.root) as entries:
                next(entries, None)
        except OSError as error:
            raise InvalidInputError(
                f"Filesystem source root {self.root} cannot be listed ({_os_reason(error)}); give the user Ferret "
                "runs as read access to it."
            ) from None

    def load_from_source(self) -> ConnectorOutput:
        unlisted: list[SkippedItem] = []
        for path, external_id, left_out in self._entries(unlisted):
            yield SkippedItem(external_id=external_id, reason=left_out) if left_out else self._read(path, external_id)
        yield from unlisted

    def poll_source(self, start: datetime | None, end: datetime) -> ConnectorOutput:
        """Files whose modification or status-change time lies in ``(start, end]`` (the latter catches a file moved
        in with an old modification time); naive datetimes are taken as UTC."""
        start_ts = _as_utc(start).timestamp() if start is not None else float("-inf")
        end_ts = _as_utc(end).timestamp()
        unlisted: list[SkippedItem] = []
        for path, external_id, left_out in self._entries(unlisted):
            if left_out is not None:
                continue
            try:
                info = path.stat()
                modified = max(info.st_mtime, info.st_ctime)
            except OSError as error:
                yield SkippedItem(external_id=external_id, reason=f"cannot read file: {_os_reason(error)}")
                continue
            if start_ts < modified <= end_ts:
                yield self._read(path, external_id)
        yield from unlisted

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        """Files changed since the previous sync's start (every file when ``cursor`` is None), in walk order, each
        followed by a mark; a first sync also lists what it leaves out."""
        since, started, after = _read_cursor(cursor)
        started = time.time() if started is None else started
        threshold = None if since is None else since - self.settings.overlap_seconds
        unlisted: list[SkippedItem] = []
        for path, external_id, left_out in sorted(self._entries(unlisted), key=lambda entry: _walk_key(entry[1])):
            if after is not None and _walk_key(external_id) <= _walk_key(after):
                continue
            if left_out is not None:
                if threshold is None:
                    yield SkippedItem(external_id=external_id, reason=left_out)
                continue
            if threshold is None or _changed_at(path) > threshold:
                yield self._read(path, external_id)
            yield CursorMark(cursor={"since": since, "started": started, "after": external_id})
        yield from unlisted  # their files were not seen: the next sync must look at them again
        yield CursorMark(cursor={"since": since if unlisted else started, "started": None, "after": None})

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        """The ``acl`` map's principals of every listed file: a config edit reaches the index without a re-read."""
        for external_id in self.list_external_ids():
            yield external_id, self.acl_groups(external_id)

    def list_external_ids(self) -> Iterator[str]:
        """Supported files present now, without parsing: a file that fails to parse is still present. Raises
        ``IncompleteListingError`` when a folder cannot be listed (a dropped mount, an I/O error), so nothing is
        pruned from a partial walk."""
        for path, external_id in self._walk(strict=True):
            if path.suffix.lower() in SUPPORTED_EXTENSIONS:
                yield external_id

    def acl_groups(self, external_id: str) -> list[str]:
        for pattern, groups in self.settings.acl.items():
            if fnmatch(external_id, pattern):
                return list(groups)
        return [PUBLIC_GROUP]

    def _walk(self, *, strict: bool = False) -> Iterator[tuple[Path, str]]:
        """Files to read below root in a stable order."""
        for path, external_id, left_out in self._entries(None if strict else []):
            if left_out is None:
                yield path, external_id

    def _entries(self, unlisted: list[SkippedItem] | None = None) -> Iterator[tuple[Path, str, str | None]]:
        """Every entry below root in a stable order with why it is left out (None: read it). ``include`` narrows
        what is considered at all, hidden entries included. A folder that cannot be listed is appended to
        ``unlisted`` as a skipped item, or raises ``IncompleteListingError`` when ``unlisted`` is None."""
        included = self.settings.include

        def folder_error(error: OSError) -> None:
            where = Path(error.filename or self.root)
            external_id = "." if where == self.root else where.relative_to(self.root).as_posix() + "/"
            external_id = external_id[:_MAX_EXTERNAL_ID_CHARS]
            reason = f"folder cannot be listed ({_os_reason(error)}); its files were not read"
            if unlisted is None:
                raise IncompleteListingError(
                    f"folder {_shortened(str(where))} cannot be listed ({_os_reason(error)})"
                ) from error
            unlisted.append(SkippedItem(external_id=external_id, reason=reason))

        for folder, subfolders, files in os.walk(self.root, onerror=folder_error):
            base = Path(folder)
            for name in sorted(subfolders):
                external_id = (base / name).relative_to(self.root).as_posix()
                if included:
                    continue
                if name.startswith("."):
                    yield base / name, external_id + "/", "hidden folder (leading dot), left out with its contents"
                elif _is_link(base / name):
                    yield base / name, external_id + "/", "symbolic link to a folder, not followed"
            subfolders[:] = sorted(n for n in subfolders if not n.startswith(".") and not _is_link(base / n))
            for name in sorted(files):
                path = base / name
                external_id = path.relative_to(self.root).as_posix()
                if included and not any(fnmatch(external_id, pattern) for pattern in included):
                    continue
                if name.startswith("."):
                    yield path, external_id, "hidden file (leading dot), left out"
                elif (inside := self._link_inside_root(path)) is not None:
                    yield path, external_id, f"symbolic link to {inside}, which is indexed under its own path"
                elif _is_special(path):
                    yield path, external_id, "not a regular file (a pipe, socket or device), left out"
                else:
                    yield path, external_id, None

    def _link_inside_root(self, path: Path) -> str | None:
        """The root-relative path a symbolic link points at, when that is an existing file the walk reads itself."""
        if not _is_link(path):
            return None
        target = path.resolve()
        if not target.is_file() or not target.is_relative_to(self.root):
            return None  # dangling, or outside root: read through the link (or reported as unreadable)
        relative = target.relative_to(self.root)
        return None if any(part.startswith(".") for part in relative.parts) else relative.as_posix()

    def _read(self, path: Path, external_id: str) -> Document | SkippedItem:
        """One file to a document, or to the reason it was skipped; never raises for a bad file."""
        extension = path.suffix.lower()
        if len(external_id) > _MAX_EXTERNAL_ID_CHARS:
            return SkippedItem(
                external_id=external_id[:_MAX_EXTERNAL_ID_CHARS],
                reason=f"path is longer than {_MAX_EXTERNAL_ID_CHARS} characters; move the file higher up",
            )
        if extension not in SUPPORTED_EXTENSIONS:
            return SkippedItem(external_id=external_id, reason=unsupported_reason(extension))
        try:
            info = path.stat()
            if info.st_size > self.settings.max_file_bytes:
                return SkippedItem(
                    external_id=external_id,
                    reason=f"file is {info.st_size:,} bytes, over the limit of {self.settings.max_file_bytes:,}; "
                    "raise FERRET_MAX_FILE_BYTES (ferret ingest) or the source's max_file_bytes to index it",
                )
            data = path.read_bytes()
        except OSError as error:
            return SkippedItem(external_id=external_id, reason=f"cannot read file: {_os_reason(error)}")
        try:
            parsed = parse_file(data, extension)
        except UnreadableFileError as error:
            return SkippedItem(external_id=external_id, reason=str(error))
        if not parsed.text.strip():
            hint = "; a scanned PDF needs OCR first" if extension == ".pdf" else ""
            return SkippedItem(external_id=external_id, reason=f"no text to index (file is empty{hint})")
        modified = datetime.fromtimestamp(info.st_mtime, tz=UTC)
        return Document.or_skipped(
            external_id=external_id,
            title=parsed.title or path.stem,
            text=parsed.text,
            source=self.source_name,
            metadata={
                "path": external_id,
                "extension": extension,
                "size": info.st_size,
            },  # the mtime travels as updated_at, outside the content hash: touching a file changes nothing
            acl_groups=self.acl_groups(external_id),
            updated_at=modified,
        )


def _shortened(text: str, limit: int = 160) -> str:
    """``text`` cut in its middle to about ``limit`` characters, so a sentence stays readable."""
    return text if len(text) <= limit else f"{text[: limit // 2]}…{text[-limit // 2 :]}"


def _is_link(path: Path) -> bool:
    """Whether ``path`` is a symbolic link; False when it cannot be looked at (its read or listing reports why)."""
    try:
        return path.is_symlink()
    except OSError:
        return False


def _is_special(path: Path) -> bool:
    """A pipe, socket or device file (through a link too): reading one can block forever. A dangling link is not
    special: its read reports it."""
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _changed_at(path: Path) -> float:
    """The later of a file's modification and status-change times; infinity when it cannot be read (so the read
    reports why)."""
    try:
        info = path.stat()
    except OSError:
        return float("inf")
    return max(info.st_mtime, info.st_ctime)


def _walk_key(external_id: str) -> tuple[str, ...]:
    """Position of a root-relative path in sync order: its components, compared as a tuple."""
    return tuple(external_id.rstrip("/").split("/"))


def _read_cursor(cursor: Any | None) -> tuple[float | None, float | None, str | None]:
    if cursor is None:
        return None, None, None
    if not isinstance(cursor, dict) or not {"since", "started", "after"} <= cursor.keys():
        raise InvalidInputError(
            f"Filesystem cursor {cursor!r} is not one this connector wrote; run `ferret source sync --full`."
        )
    return cursor["since"], cursor["started"], cursor["after"]


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _os_reason(error: OSError) -> str:
    return error.strerror or type(error).__name__
