"""SharePoint Online / OneDrive document libraries as a source, through Microsoft Graph (msal + httpx).

Sync follows each drive's delta (``GET /drives/{id}/root/delta``): the first sync pages through every item with
``@odata.nextLink`` and ends with an ``@odata.deltaLink``, which the next sync starts from and which returns only
what changed since (edits, renames and moves as changed items, deletions with a ``deleted`` facet, and, because the
request says ``Prefer: deltashowsharingchanges``, items whose sharing changed). The cursor holds one link per drive
and is marked after every page, so an interrupted sync resumes on the page it stopped at. A delta link the service
no longer honours answers ``410 Gone`` (``resyncRequired``): that drive starts again from a full enumeration, whose
unchanged items the engine recognises by their content hash.

Permissions come from each item's effective permission list (``permissions.py``); ``iter_permissions`` reads them
for every item (group edits and inherited changes), and ``group_memberships`` expands the Entra groups it met with
``transitiveMembers``. Deletions come from the delta's ``deleted`` facets and from ``list_external_ids``, a full
enumeration of every drive that raises on any error.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from ferret.connectors.access import reason
from ferret.connectors.filesystem.parsers import (
    SUPPORTED_EXTENSIONS,
    UnreadableFileError,
    parse_file,
    unsupported_reason,
)
from ferret.connectors.retry import RetryBudgetExceededError, RetryPolicy
from ferret.connectors.sharepoint.graph import GraphClient, GraphError
from ferret.connectors.sharepoint.permissions import entra_groups, item_principals
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    Deleted,
    GroupMembership,
    GroupSource,
    IncompleteListingError,
    IncrementalConnector,
    PermissionPass,
    SyncItem,
)
from ferret.core.sources.principals import group_principal, user_principal

_DELTA_PREFER = {"Prefer": "deltashowsharingchanges, hierarchicalsharing"}
_CHECK_BUDGET_S = 10.0
"""Longest ``check_access`` spends retrying one call (a sync has ``retry_budget_s``)."""


class SharePointConfig(BaseModel):
    """The connector's config as stored on the source row; unknown keys are refused so typos surface."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(min_length=1)
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    site_id: str = Field(min_length=1)
    name: str | None = None
    drives: list[str] = Field(default_factory=list)
    authority_host: str = Field(default="https://login.microsoftonline.com", pattern=r"^https://")
    graph_url: str = Field(default="https://graph.microsoft.com/v1.0", pattern=r"^https?://")
    scope: str = "https://graph.microsoft.com/.default"
    ca_bundle: str | None = None
    public_names: list[str] = Field(default_factory=lambda: ["Everyone", "Everyone except external users"])
    max_file_bytes: int = Field(default=50_000_000, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    retry_attempts: int = Field(default=6, ge=1)
    retry_budget_s: float = Field(default=300.0, gt=0)


class SharePointConnector(IncrementalConnector, SlimConnector, PermissionPass, GroupSource):
    """The files of a SharePoint site's document libraries (``drives``: ids or names; empty = all of them).

    The app registration needs the application permissions ``Sites.Read.All`` (or ``Sites.Selected``) and
    ``GroupMember.Read.All``. ``authority_host`` and ``graph_url`` point elsewhere for national clouds; ``ca_bundle``
    is a PEM file of the CAs to trust when a proxy re-signs TLS.

    Example:
        >>> connector = SharePointConnector(tenant_id="...", client_id="...", client_secret="...",
        ...                                 site_id="contoso.sharepoint.com,1b2...,9c4...", name="sp")
        >>> next(item for item in connector.sync(None) if isinstance(item, Document)).acl_groups
        ['sp:group:0b5c...', 'user:ann@contoso.com']
    """

    kind = "sharepoint"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = SharePointConfig(**config)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'config'}: {problem['msg']}"
                for problem in error.errors()
            )
            keys = ", ".join(SharePointConfig.model_fields)
            raise InvalidInputError(f"Invalid sharepoint connector config ({problems}); the keys are {keys}.") from None
        settings = self.settings
        self.graph = GraphClient(
            tenant_id=settings.tenant_id,
            client_id=settings.client_id,
            client_secret=settings.client_secret.get_secret_value(),
            authority_host=settings.authority_host,
            graph_url=settings.graph_url,
            scope=settings.scope,
            verify=settings.ca_bundle or True,
            timeout_s=settings.timeout_s,
            policy=RetryPolicy(max_attempts=settings.retry_attempts, budget_s=settings.retry_budget_s),
        )
        self._groups_seen: set[str] | None = None
        self.resyncs = 0
        """Delta links refused with 410 since this connector was built (a full enumeration followed each)."""

    def config_json(self) -> dict[str, Any]:
        """The stored config: the client secret never round-trips in plain text."""
        stored = super().config_json()
        stored.pop("client_secret", None)
        return stored

    # -- the capabilities ----------------------------------------------------------------------------------

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        links = _read_cursor(cursor)
        for drive in self._drives():
            link = links.get(drive) or f"drives/{drive}/root/delta"
            while True:
                try:
                    page = self.graph.json(link, headers=_DELTA_PREFER)
                except GraphError as error:
                    if error.status != 410:
                        raise
                    self.resyncs += 1
                    link = f"drives/{drive}/root/delta"  # the token expired: enumerate everything again
                    continue
                for item in page.get("value", []):
                    result = self._item(drive, item)
                    if result is not None:
                        yield result
                next_link = page.get("@odata.nextLink")
                links[drive] = next_link or page.get("@odata.deltaLink") or link
                yield CursorMark(cursor={"drives": dict(links)})
                if not next_link:
                    break
                link = next_link

    def list_external_ids(self) -> Iterator[str]:
        for drive in self._drives():
            for item in self._enumerate(drive):
                yield _external_id(drive, item["id"])

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        groups: set[str] = set()
        for drive in self._drives():
            for item in self._enumerate(drive):
                principals = self._principals(drive, item["id"])
                groups |= entra_groups(principals, self.source_name)
                yield _external_id(drive, item["id"]), principals
        self._groups_seen = groups  # complete: group_memberships needs no second pass

    def group_memberships(self) -> Iterator[GroupMembership]:
        """``transitiveMembers`` of every Entra group that an item's permissions name."""
        if self._groups_seen is None:
            for _ in self.iter_permissions():
                pass
        groups = self._groups_seen or set()
        for group_id in sorted(groups):
            group = group_principal(self.source_name, group_id)
            try:
                members = list(self.graph.paged(f"groups/{group_id}/transitiveMembers"))
            except GraphError as error:
                if error.status != 404:
                    raise
                members = []  # a group deleted since it was granted has no members
            for member in members:
                address = member.get("mail") or member.get("userPrincipalName")
                if member.get("@odata.type") == "#microsoft.graph.user" and address:
                    yield GroupMembership(group=group, member=user_principal(str(address)))

    def check_access(self) -> None:
        """An app token, then ``GET /sites/{site_id}/drives`` (one retry at most): the credentials, the site and the
        configured ``drives`` in two round trips."""
        where = f"SharePoint site {self.settings.site_id!r} at {self.settings.graph_url}"
        kept = self.graph.policy
        self.graph.policy = RetryPolicy(max_attempts=2, budget_s=min(self.settings.timeout_s, _CHECK_BUDGET_S))
        try:
            self._drives()
        except GraphError as error:
            raise InvalidInputError(
                f"{where} refused listing its libraries ({error}); grant the app Sites.Read.All or Sites.Selected."
            ) from None
        except (httpx.HTTPError, requests.RequestException, RetryBudgetExceededError) as error:
            raise InvalidInputError(
                f"{where} could not be reached ({reason(error)}); check graph_url, authority_host and that the "
                "service is up."
            ) from None
        finally:
            self.graph.policy = kept

    def close(self) -> None:
        self.graph.close()

    # -- helpers -------------------------------------------------------------------------------------------

    def _drives(self) -> list[str]:
        """Ids of the configured document libraries of the site, sorted (the cursor walks them in order)."""
        try:
            drives = list(self.graph.paged(f"sites/{self.settings.site_id}/drives"))
        except GraphError as error:
            if error.status == 404:
                raise InvalidInputError(
                    f"SharePoint site {self.settings.site_id!r} was not found or the app cannot see it; fix 'site_id'."
                ) from error
            raise
        wanted = set(self.settings.drives)
        chosen = sorted(d["id"] for d in drives if not wanted or d["id"] in wanted or d.get("name") in wanted)
        missing = wanted - {d["id"] for d in drives} - {d.get("name") for d in drives}
        if missing:
            raise InvalidInputError(f"SharePoint drives {sorted(missing)} are not libraries of the site; fix 'drives'.")
        return chosen

    def _enumerate(self, drive: str) -> Iterator[dict[str, Any]]:
        """Every live file of a drive from a fresh delta enumeration; complete or raises."""
        try:
            for item in self.graph.paged(f"drives/{drive}/root/delta"):
                if "file" in item and "deleted" not in item:
                    yield item
        except GraphError as error:
            raise IncompleteListingError(f"cannot enumerate SharePoint drive {drive}: {error}") from error

    def _principals(self, drive: str, item_id: str) -> list[str]:
        permissions = self.graph.paged(f"drives/{drive}/items/{item_id}/permissions")
        return item_principals(permissions, self.source_name, self.settings.public_names)

    def _item(self, drive: str, item: dict[str, Any]) -> Document | SkippedItem | Deleted | None:
        """One delta entry: a deletion marker, a document, a skipped file, or ``None`` for a folder."""
        external_id = _external_id(drive, item["id"])
        if "deleted" in item:
            return Deleted(external_id=external_id)
        if "file" not in item:
            return None
        name = str(item.get("name", ""))
        extension = posixpath.splitext(name)[1].lower()
        if extension not in SUPPORTED_EXTENSIONS:
            return SkippedItem(external_id=external_id, reason=unsupported_reason(extension))
        size = int(item.get("size") or 0)
        if size > self.settings.max_file_bytes:
            return SkippedItem(
                external_id=external_id,
                reason=f"file is {size:,} bytes, over the max_file_bytes limit of "
                f"{self.settings.max_file_bytes:,}; raise max_file_bytes to index it",
            )
        try:
            data = self.graph.get(f"drives/{drive}/items/{item['id']}/content").content
            principals = self._principals(drive, item["id"])
        except GraphError as error:
            if error.status in (403, 404):  # gone or hidden since the delta was written
                return SkippedItem(external_id=external_id, reason=f"cannot read file: {error}")
            raise
        try:
            parsed = parse_file(data, extension)
        except UnreadableFileError as error:
            return SkippedItem(external_id=external_id, reason=str(error))
        if not parsed.text.strip():
            return SkippedItem(external_id=external_id, reason="no text to index (file is empty)")
        folder = str((item.get("parentReference") or {}).get("path", "")).partition("root:")[2].strip("/")
        modified = item.get("lastModifiedDateTime")
        return Document(
            external_id=external_id,
            title=parsed.title or posixpath.splitext(name)[0],
            text=parsed.text,
            source=self.source_name,
            metadata={"path": posixpath.join(folder, name), "url": item.get("webUrl", ""), "drive": drive},
            acl_groups=principals,
            updated_at=datetime.fromisoformat(modified.replace("Z", "+00:00")) if modified else None,
        )


def _external_id(drive: str, item_id: str) -> str:
    """Drive and item id: stable across renames and moves, unique across the site's libraries."""
    return f"{drive}:{item_id}"


def _read_cursor(cursor: Any | None) -> dict[str, str]:
    if cursor is None:
        return {}
    if not isinstance(cursor, dict) or not isinstance(cursor.get("drives"), dict):
        raise InvalidInputError(f"SharePoint cursor {cursor!r} is not one this connector wrote; reset the cursor.")
    return dict(cursor["drives"])
