"""An SMB share (Windows file server, Samba, NAS) as a source, read with smbprotocol's ``smbclient``.

One sync walks the share below ``path`` in a stable order (names sorted, depth first). A file is delivered when
its LastWriteTime or ChangeTime is after the cursor's watermark minus ``overlap_seconds``. On NTFS the ChangeTime
moves on a DACL edit too, but Samba reports the LastWriteTime as ChangeTime, so permissions also have their own
pass (``iter_permissions``: a walk and one security-descriptor query per file, no content read); the engine sees
the same content with other principals and updates the payload only. Deletions come from the complete walk of
``list_external_ids``, which raises as soon as one folder cannot be listed, so nothing is pruned from a partial walk.

The account in the config must be able to open every file with READ_CONTROL and read it (a backup operator, or
``admin users`` on Samba); what the share's users may read comes from each file's DACL (``acl.py``).

Cursor: ``{"since": <epoch s>, "high": <epoch s>, "after": <last path done or null>}``. A mark is set after every
file, so an interrupted walk resumes after the last file it finished and keeps the watermark it started from.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from datetime import datetime
from fnmatch import fnmatch
from typing import Any

import smbclient
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from smbprotocol.exceptions import (
    LogonFailure,
    SMBAuthenticationError,
    SMBException,
    WrongPassword,
)
from smbprotocol.header import NtStatus
from smbprotocol.open import FilePipePrinterAccessMask

from ferret.connectors.access import reason
from ferret.connectors.filesystem.parsers import (
    SUPPORTED_EXTENSIONS,
    UnreadableFileError,
    parse_file,
    unsupported_reason,
)
from ferret.connectors.smb.acl import ADMIN_SIDS, flatten_share_and_file, query_dacl, readers, sid_principals
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    IncompleteListingError,
    IncrementalConnector,
    PermissionPass,
    SyncItem,
)

_CHECK_TIMEOUT_S = 10
"""Seconds ``check_access`` waits for the server to accept a connection (syncs keep smbclient's 60)."""


class SmbConfig(BaseModel):
    """The connector's config as stored on the source row; unknown keys are refused so typos surface."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    share: str = Field(min_length=1, pattern=r"^[^\\/]+$")
    username: str = Field(min_length=1)
    password: SecretStr
    port: int = Field(default=445, gt=0, lt=65536)
    path: str = ""
    name: str | None = None
    encrypt: bool = False
    sid_groups: dict[str, str] = Field(default_factory=dict)
    sid_users: dict[str, str] = Field(default_factory=dict)
    share_allow: list[str] | None = None
    ignore_sids: list[str] = Field(default_factory=lambda: list(ADMIN_SIDS))
    include: list[str] = Field(default_factory=list)
    max_file_bytes: int = Field(default=50_000_000, gt=0)
    overlap_seconds: float = Field(default=300.0, ge=0)


class SmbConnector(IncrementalConnector, SlimConnector, PermissionPass):
    """Files of one SMB share with their DACL as principals.

    ``sid_groups`` maps SIDs to group names (``<source>:group:<name>``) and ``sid_users`` SIDs to e-mail addresses
    (``user:<email>``). ``ignore_sids`` are left out of every DACL: by default SYSTEM, Administrators and the
    CREATOR placeholders, which can read everything and would only lengthen every document's principals.
    ``share_allow`` lists the SIDs the share ACL lets read (``None``: everyone, the Windows default);
    smbprotocol cannot read a share ACL (that is an SRVSVC RPC call), so it is configured.

    Example:
        >>> connector = SmbConnector(host="files.corp", share="docs", username="svc-ferret", password="...",
        ...                          sid_groups={"S-1-5-21-1-2-3-1104": "hr"})
        >>> next(connector.sync(None)).acl_groups
        ['files:group:hr']
    """

    kind = "smb"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = SmbConfig(**config)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'config'}: {problem['msg']}"
                for problem in error.errors()
            )
            keys = ", ".join(SmbConfig.model_fields)
            raise InvalidInputError(f"Invalid smb connector config ({problems}); the keys are {keys}.") from None
        self._cache: dict[str, Any] = {}
        settings = self.settings
        self.root = "\\\\" + settings.host + "\\" + settings.share
        self._folder = settings.path.strip("/\\").replace("\\", "/")
        self._share_principals = (
            None
            if settings.share_allow is None
            else sid_principals(settings.share_allow, self.source_name, settings.sid_groups, settings.sid_users)
        )

    def config_json(self) -> dict[str, Any]:
        """The stored config: the password is a secret and never round-trips in plain text."""
        stored = super().config_json()
        stored.pop("password", None)
        return stored

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        since, high, after = _read_cursor(cursor)
        threshold = since - self.settings.overlap_seconds if since is not None else None
        folders_missed = False
        folder_times: dict[str, float] = {}
        for external_id, entry in self._walk(strict=False, after=after, folder_times=folder_times):
            if isinstance(entry, SkippedItem):
                folders_missed = True  # its files were not seen: the watermark must not move past them
                yield entry
                continue
            info = entry.smb_info
            changed = max(info.last_write_time.timestamp(), info.change_time.timestamp())
            # a rename or a new file moves its folder's LastWriteTime, not its own: all of that folder comes again
            folder_changed = folder_times.get(posixpath.dirname(external_id), 0.0)
            if threshold is None or changed > threshold or folder_changed > threshold:
                yield self._read(external_id, info.last_write_time, info.end_of_file)
            high = max(changed, folder_changed, high if high is not None else changed)
            yield CursorMark(cursor={"since": since, "high": high, "after": external_id})
        final = high if since is None or high is None else max(since, high)
        if folders_missed:
            final = since
        yield CursorMark(cursor={"since": final, "high": final, "after": None})

    def list_external_ids(self) -> Iterator[str]:
        for external_id, entry in self._walk(strict=True):
            if posixpath.splitext(external_id)[1].lower() in SUPPORTED_EXTENSIONS and not isinstance(
                entry, SkippedItem
            ):
                yield external_id

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        """Principals of every listed file; raises (nothing changes) when one folder or file cannot be read."""
        for external_id in self.list_external_ids():
            try:
                yield external_id, self.acl_groups(external_id)
            except (SMBException, OSError) as error:
                raise IncompleteListingError(f"cannot read the DACL of SMB file {external_id}: {error}") from error

    def check_access(self) -> None:
        """Connect and authenticate (at most ``_CHECK_TIMEOUT_S`` to connect), then list the configured folder once."""
        s = self.settings
        server = f"SMB server {s.host}:{s.port}"
        try:
            smbclient.register_session(
                s.host,
                username=s.username,
                password=s.password.get_secret_value(),
                port=s.port,
                encrypt=s.encrypt,
                connection_timeout=_CHECK_TIMEOUT_S,
                connection_cache=self._cache,
            )
        except (SMBAuthenticationError, LogonFailure, WrongPassword) as error:
            why = _status_name(getattr(error, "status", None)) or reason(error)
            raise InvalidInputError(
                f"{server} refused the logon of user {s.username!r} ({why}); check username and password."
            ) from None
        except (SMBException, OSError, ValueError) as error:
            raise InvalidInputError(
                f"{server} could not be reached ({reason(error)}); check host and port, and that the server is up."
            ) from None
        folder = self._unc("")
        try:
            with smbclient.scandir(folder, **self._kwargs()) as entries:
                next(iter(entries), None)
        except (SMBException, OSError, ValueError) as error:
            raise InvalidInputError(_folder_refusal(folder, error, s.username)) from None

    def close(self) -> None:
        smbclient.reset_connection_cache(connection_cache=self._cache)

    def acl_groups(self, external_id: str) -> list[str]:
        """The flattened principals of one file (share ∧ DACL), read from the server now."""
        with self._open(external_id, FilePipePrinterAccessMask.READ_CONTROL) as raw:
            return self._principals(raw)

    def _principals(self, raw: Any) -> list[str]:
        settings = self.settings
        sids = readers(query_dacl(raw.fd)) - set(settings.ignore_sids)
        file = sid_principals(sids, self.source_name, settings.sid_groups, settings.sid_users)
        return flatten_share_and_file(self._share_principals, file)

    def _unc(self, relative: str) -> str:
        parts = [part for part in (self._folder + "/" + relative).split("/") if part]
        return "\\".join([self.root, *parts])

    def _kwargs(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "username": settings.username,
            "password": settings.password.get_secret_value(),
            "port": settings.port,
            "encrypt": settings.encrypt,
            "connection_cache": self._cache,
        }

    def _open(self, external_id: str, access: int) -> Any:
        return smbclient.open_file(
            self._unc(external_id), mode="rb", buffering=0, desired_access=access, **self._kwargs()
        )

    def _walk(
        self, *, strict: bool, after: str | None = None, folder_times: dict[str, float] | None = None
    ) -> Iterator[tuple[str, Any]]:
        """``(external_id, SMBDirEntry)`` of every file in walk order (each folder's entries sorted by name, a
        subfolder walked where its name sorts), so paths come in the order of their component tuples and a resumed
        walk can skip every file up to ``after``. A subfolder that cannot be listed raises when ``strict`` (the
        deletion listing), else becomes a ``SkippedItem`` and the walk goes on; the root must always list.
        ``folder_times`` receives each folder's LastWriteTime/ChangeTime (epoch seconds) before its files come."""
        folder_times = {} if folder_times is None else folder_times
        try:
            root = smbclient.stat(self._unc(""), **self._kwargs())
            folder_times[""] = max(root.st_mtime, root.st_chgtime)
            entries = self._scandir("")
        except (SMBException, OSError, ValueError) as error:
            raise InvalidInputError(
                f"Cannot list SMB folder {self._unc('')}: {error}; check host, port, share, path and credentials."
            ) from error
        key = _walk_key(after) if after else None
        yield from self._walk_entries("", entries, strict=strict, after=key, folder_times=folder_times)

    def _walk_entries(
        self,
        folder: str,
        entries: list[Any],
        *,
        strict: bool,
        after: tuple[str, ...] | None,
        folder_times: dict[str, float],
    ) -> Iterator[tuple[str, Any]]:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            relative = f"{folder}/{entry.name}" if folder else entry.name
            key = _walk_key(relative)
            if entry.is_dir():
                if after is not None and key < after and after[: len(key)] != key:
                    continue  # every file below sorts before the resume point
                try:
                    children = self._scandir(relative)
                except (SMBException, OSError) as error:
                    if strict:
                        raise IncompleteListingError(f"cannot list SMB folder {relative}: {error}") from error
                    yield relative, SkippedItem(external_id=relative, reason=f"cannot list folder: {error}")
                    continue
                info = entry.smb_info
                folder_times[relative] = max(info.last_write_time.timestamp(), info.change_time.timestamp())
                yield from self._walk_entries(relative, children, strict=strict, after=after, folder_times=folder_times)
                continue
            if after is not None and key <= after:
                continue
            if self.settings.include and not any(fnmatch(relative, pattern) for pattern in self.settings.include):
                continue
            yield relative, entry

    def _scandir(self, relative: str) -> list[Any]:
        return sorted(smbclient.scandir(self._unc(relative), **self._kwargs()), key=lambda entry: entry.name)

    def _read(self, external_id: str, modified: datetime, size: int) -> Document | SkippedItem:
        """One file to a document, or to the reason it was skipped; never raises for one bad file."""
        extension = posixpath.splitext(external_id)[1].lower()
        if extension not in SUPPORTED_EXTENSIONS:
            return SkippedItem(external_id=external_id, reason=unsupported_reason(extension))
        if size > self.settings.max_file_bytes:
            return SkippedItem(
                external_id=external_id,
                reason=f"file is {size:,} bytes, over the max_file_bytes limit of "
                f"{self.settings.max_file_bytes:,}; raise max_file_bytes to index it",
            )
        access = FilePipePrinterAccessMask.READ_CONTROL | FilePipePrinterAccessMask.FILE_READ_DATA
        try:
            with self._open(external_id, access) as raw:
                principals = self._principals(raw)
                data = raw.readall()
        except (SMBException, OSError) as error:
            return SkippedItem(external_id=external_id, reason=f"cannot read file: {error}")
        try:
            parsed = parse_file(data, extension)
        except UnreadableFileError as error:
            return SkippedItem(external_id=external_id, reason=str(error))
        if not parsed.text.strip():
            return SkippedItem(external_id=external_id, reason="no text to index (file is empty)")
        return Document(
            external_id=external_id,
            title=parsed.title or posixpath.splitext(posixpath.basename(external_id))[0],
            text=parsed.text,
            source=self.source_name,
            metadata={"path": external_id, "unc": self._unc(external_id), "extension": extension, "size": size},
            acl_groups=principals,
            updated_at=modified,
        )


def _folder_refusal(folder: str, error: BaseException, username: str) -> str:
    """The sentence for a share or folder the check could not list, naming the setting to fix."""
    status = getattr(error, "ntstatus", None) or getattr(error, "status", None)
    if status in (NtStatus.STATUS_BAD_NETWORK_NAME, NtStatus.STATUS_NOT_FOUND):  # Samba answers the latter
        fix = "the share does not exist; check share"
    elif status in (NtStatus.STATUS_OBJECT_NAME_NOT_FOUND, NtStatus.STATUS_OBJECT_PATH_NOT_FOUND):
        fix = "the folder does not exist; check path"
    elif status == NtStatus.STATUS_ACCESS_DENIED:
        fix = f"user {username!r} may not list it; grant it read access to the share and folder"
    else:
        fix = "check share and path"
    return f"Cannot list SMB folder {folder} ({_status_name(status) or reason(error)}): {fix}."


def _status_name(status: int | None) -> str | None:
    """``STATUS_LOGON_FAILURE`` for 0xc000006d: the NTSTATUS name an admin can look up."""
    return next((name for name, value in vars(NtStatus).items() if value == status), None) if status else None


def _walk_key(external_id: str) -> tuple[str, ...]:
    """Position of a path in walk order: its components, compared as a tuple."""
    return tuple(external_id.split("/"))


def _read_cursor(cursor: Any | None) -> tuple[float | None, float | None, str | None]:
    if cursor is None:
        return None, None, None
    if not isinstance(cursor, dict) or not {"since", "high", "after"} <= cursor.keys():
        raise InvalidInputError(f"SMB cursor {cursor!r} is not one this connector wrote; reset the source's cursor.")
    return cursor["since"], cursor["high"], cursor["after"]
