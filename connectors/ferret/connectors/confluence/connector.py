"""Confluence Data Center pages as a source, read with atlassian-python-api's ``Confluence`` client.

Sync: one CQL search ``type = page and space in (...) and lastmodified >= "<watermark - overlap>" order by
lastmodified asc`` with the content expanded (storage body, version, space, ancestors, read restrictions), followed
through its ``_links.next`` pages. CQL dates have minute precision, so results at or before the watermark (to the
millisecond, from ``lastModified``) minus ``overlap_minutes`` are dropped on this side. Results come in modification
order, so a ``CursorMark`` after each page is exact: a resumed sync starts from the last page it finished.

Permissions: a page's readers are the space's VIEW layer ∧ every read restriction on the page and its ancestors,
flattened with the group members (``permissions.py``). Restriction and space-permission edits do not change a page's
``lastmodified``, so ``iter_permissions`` is a separate pass over every page. Deletions come from the complete id
listing of each space (``list_external_ids``), which raises on any error so nothing is pruned from a partial list.

Every request goes through ``ferret.connectors.retry.call_with_retry`` (429/503 honour ``Retry-After``); the
client's own retries are off so the budget is one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import requests
from atlassian import Confluence
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from selectolax.lexbor import LexborHTMLParser

from ferret.connectors.access import reason
from ferret.connectors.confluence.permissions import PrincipalNames, groups_named
from ferret.connectors.retry import RetryBudgetExceededError, RetryPolicy, call_with_retry, retry_after_seconds
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    GroupMembership,
    GroupSource,
    IncrementalConnector,
    PermissionPass,
    SyncItem,
)
from ferret.core.sources.principals import flatten_layers

T = TypeVar("T")
_BLOCK_END = re.compile(r"(</(?:p|h[1-6]|li|tr|div|pre|blockquote|table|ul|ol)>|<br\s*/?>)", re.IGNORECASE)
_RESTRICTIONS = "restrictions.read.restrictions.user,restrictions.read.restrictions.group"
_CONTENT_EXPAND = f"body.storage,version,space,ancestors,{_RESTRICTIONS}"
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
_CHECK_BUDGET_S = 10.0
"""Longest ``check_access`` spends retrying one call (a sync has ``retry_budget_s``)."""


class ConfluenceConfig(BaseModel):
    """The connector's config as stored on the source row; unknown keys are refused so typos surface."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://")
    username: str = Field(min_length=1)
    password: SecretStr
    spaces: list[str] = Field(min_length=1)
    name: str | None = None
    email_domain: str | None = None
    public_groups: list[str] = Field(default_factory=list)
    overlap_minutes: float = Field(default=5.0, ge=0)
    page_size: int = Field(default=50, ge=1, le=100)
    max_page_chars: int = Field(default=5_000_000, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    retry_attempts: int = Field(default=6, ge=1)
    retry_budget_s: float = Field(default=300.0, gt=0)


class ConfluenceConnector(IncrementalConnector, SlimConnector, PermissionPass, GroupSource):
    """Pages of some Confluence Data Center spaces, with their space and page permissions as principals.

    ``password`` is the user's password or a personal access token's secret (basic auth). ``public_groups`` names
    groups that mean everyone (e.g. ``confluence-users`` where every employee has a licence).

    Example:
        >>> connector = ConfluenceConnector(url="https://wiki.corp", username="ferret-bot", password="...",
        ...                                 spaces=["ENG"], email_domain="corp.com")
        >>> [item for item in connector.sync(None) if isinstance(item, Document)][0].acl_groups
        ['wiki:group:eng', 'user:ann@corp.com']
    """

    kind = "confluence"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = ConfluenceConfig(**config)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'config'}: {problem['msg']}"
                for problem in error.errors()
            )
            keys = ", ".join(ConfluenceConfig.model_fields)
            raise InvalidInputError(f"Invalid confluence connector config ({problems}); the keys are {keys}.") from None
        settings = self.settings
        self.base_url = settings.url.rstrip("/")
        self.client = Confluence(
            url=self.base_url,
            username=settings.username,
            password=settings.password.get_secret_value(),
            cloud=False,
            timeout=int(settings.timeout_s),
            retry_with_header=False,  # retries belong to call_with_retry, with one budget
        )
        self.names = PrincipalNames(self.source_name, settings.email_domain, settings.public_groups)
        self.policy = RetryPolicy(max_attempts=settings.retry_attempts, budget_s=settings.retry_budget_s)
        self._permission_pass: _Access | None = None

    def config_json(self) -> dict[str, Any]:
        """The stored config: the password is a secret and never round-trips in plain text."""
        stored = super().config_json()
        stored.pop("password", None)
        return stored

    # -- the capabilities ----------------------------------------------------------------------------------

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        since = _read_cursor(cursor)
        overlap = timedelta(minutes=self.settings.overlap_minutes)
        spaces = ", ".join(f'"{key}"' for key in self.settings.spaces)
        cql = f"type = page and space in ({spaces})"
        if since is not None:
            cql += f' and lastmodified >= "{since - overlap:%Y/%m/%d %H:%M}"'
        cql += " order by lastmodified asc"
        expand = ",".join(f"content.{item}" for item in _CONTENT_EXPAND.split(","))
        access = _Access(self)
        high = since
        for result in self._paged("rest/api/search", {"cql": cql, "limit": self.settings.page_size, "expand": expand}):
            modified = datetime.fromisoformat(result["lastModified"])
            if since is not None and modified < since - overlap:
                continue  # inside the CQL minute but before the watermark
            yield self._document(result["content"], modified, access)
            high = modified if high is None else max(high, modified)
            yield CursorMark(cursor={"since": high.isoformat()})
        yield CursorMark(cursor={"since": high.isoformat() if high else None})

    def list_external_ids(self) -> Iterator[str]:
        for space in self.settings.spaces:
            for content in self._space_pages(space, expand=""):
                yield str(content["id"])

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        access = _Access(self)
        for space in self.settings.spaces:
            for content in self._space_pages(space, expand=f"space,ancestors,{_RESTRICTIONS}"):
                access.remember(content)
                yield str(content["id"]), access.principals(content)
        self._permission_pass = access  # complete: its group members serve group_memberships below

    def group_memberships(self) -> Iterator[GroupMembership]:
        """Members of every group a space permission or a page restriction of the configured spaces names (those
        the permission pass just met, when it ran on this connector; otherwise a pass over the restrictions)."""
        if self._permission_pass is not None:
            members = self._permission_pass.known_members()
            for group in sorted(members):
                for member in sorted(members[group]):
                    yield GroupMembership(group=group, member=member)
            return
        access = _Access(self)
        groups: set[str] = set()
        for space in self.settings.spaces:
            groups |= groups_named([access.space_layer(space)])
            for content in self._space_pages(space, expand=_RESTRICTIONS):
                layer = self.names.restriction_layer((content.get("restrictions") or {}).get("read"))
                groups |= groups_named([layer or set()])
        for group in sorted(groups):
            for member in sorted(access.members(group)):
                yield GroupMembership(group=group, member=member)

    def close(self) -> None:
        self.client.close()

    # -- requests ------------------------------------------------------------------------------------------

    def check_access(self) -> None:
        """``GET /rest/api/space/{key}`` of each configured space, as the configured user (one retry at most): the
        credentials, the URL and the space keys in one or two round trips."""
        policy = RetryPolicy(max_attempts=2, budget_s=min(self.settings.timeout_s, _CHECK_BUDGET_S))
        for key in self.settings.spaces:
            try:
                self.space(key, expand="", policy=policy)
            except (requests.RequestException, RetryBudgetExceededError) as error:
                raise InvalidInputError(
                    f"Confluence at {self.base_url} could not be reached to read space {key!r} ({reason(error)}); "
                    "check url and that the server is up."
                ) from None

    def call(self, request: Callable[[], T], what: str, policy: RetryPolicy | None = None) -> T:
        """One API call with the retry policy; credentials and missing spaces become one-sentence errors."""
        try:
            return call_with_retry(request, _transient, policy or self.policy)
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else None
            if status in (401, 403):
                raise InvalidInputError(
                    f"Confluence at {self.base_url} refused {self.settings.username!r} (HTTP {status}) while "
                    f"reading {what}; check the username, the password or token, and the account's permissions."
                ) from error
            raise

    def _paged(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every result of a paged endpoint, following ``_links.next`` (relative to the site's base URL)."""
        url, query, absolute = path, dict(params), False
        while True:
            body = self.call(partial(self.client.get, url, params=query, absolute=absolute), path)
            if not isinstance(body, dict):
                raise RuntimeError(f"Confluence answered {path} with {type(body).__name__}, not a JSON object")
            yield from body.get("results", [])
            next_link = (body.get("_links") or {}).get("next")
            if not next_link:
                return
            url, query, absolute = self.base_url + "/" + next_link.lstrip("/"), {}, True

    def _space_pages(self, space: str, expand: str) -> Iterator[dict[str, Any]]:
        """Every page of a space; a missing space raises (its listing would be empty, which prunes nothing)."""
        self.space(space, expand="")
        params: dict[str, Any] = {"spaceKey": space, "type": "page", "limit": self.settings.page_size}
        if expand:
            params["expand"] = expand
        yield from self._paged("rest/api/content", params)

    def space(self, key: str, expand: str, policy: RetryPolicy | None = None) -> dict[str, Any]:
        """``GET /rest/api/space/{key}``; a missing or hidden space is a one-sentence error."""
        params = {"expand": expand} if expand else None
        try:
            space = self.call(lambda: self.client.get(f"rest/api/space/{key}", params=params), f"space {key}", policy)
        except requests.HTTPError as error:
            if error.response is not None and error.response.status_code == 404:
                raise InvalidInputError(
                    f"Confluence space {key!r} does not exist or is hidden from the account; fix 'spaces'."
                ) from error
            raise
        return space if isinstance(space, dict) else {}

    def _document(self, content: dict[str, Any], modified: datetime, access: _Access) -> Document | SkippedItem:
        page_id = str(content["id"])
        storage = ((content.get("body") or {}).get("storage") or {}).get("value", "")
        if len(storage) > self.settings.max_page_chars:
            return SkippedItem(
                external_id=page_id,
                reason=f"page body is {len(storage):,} characters, over the max_page_chars limit of "
                f"{self.settings.max_page_chars:,}; raise max_page_chars to index it",
            )
        text = storage_text(storage)
        if not text:
            return SkippedItem(external_id=page_id, reason="page is empty")
        access.remember(content)
        ancestors = [ancestor.get("title", "") for ancestor in content.get("ancestors") or []]
        return Document(
            external_id=page_id,
            title=content.get("title", ""),
            text=text,
            source=self.source_name,
            metadata={
                "space": (content.get("space") or {}).get("key", ""),
                "url": self.base_url + ((content.get("_links") or {}).get("webui") or ""),
                "path": " / ".join([*ancestors, content.get("title", "")]),
            },
            acl_groups=access.principals(content),
            updated_at=modified,
        )


class _Access:
    """Space layers, restrictions of ancestors and group members, each read once per pass."""

    def __init__(self, connector: ConfluenceConnector) -> None:
        self.connector = connector
        self.names = connector.names
        self._spaces: dict[str, set[str]] = {}
        self._restrictions: dict[str, set[str] | None] = {}
        self._members: dict[str, set[str]] = {}

    def space_layer(self, key: str) -> set[str]:
        if key not in self._spaces:
            self._spaces[key] = self.names.space_layer(self.connector.space(key, expand="permissions"))
        return self._spaces[key]

    def remember(self, content: dict[str, Any]) -> None:
        """Keep the page's own restriction for its descendants, when the content carries it."""
        if "restrictions" in content:
            self._restrictions[str(content["id"])] = self.names.restriction_layer(content["restrictions"].get("read"))

    def restriction(self, page_id: str) -> set[str] | None:
        if page_id not in self._restrictions:
            client = self.connector.client
            path = f"rest/api/content/{page_id}/restriction/byOperation"
            by_operation = self.connector.call(lambda: client.get(path), f"the restrictions of page {page_id}")
            self._restrictions[page_id] = self.names.restriction_layer((by_operation or {}).get("read"))
        return self._restrictions[page_id]

    def members(self, group: str) -> set[str]:
        if group not in self._members:
            name = group.split(":group:", 1)[1]
            try:
                results = list(self.connector._paged(f"rest/api/group/{name}/member", {"limit": 200}))
            except requests.HTTPError as error:
                if error.response is None or error.response.status_code != 404:
                    raise
                results = []  # a group that no longer exists has no members
            self._members[group] = {self.names.user(user["username"]) for user in results}
        return self._members[group]

    def known_members(self) -> dict[str, set[str]]:
        return dict(self._members)

    def principals(self, content: dict[str, Any]) -> list[str]:
        """Space VIEW ∧ the read restrictions of the ancestors and the page, flattened to "any of"."""
        layers = [self.space_layer((content.get("space") or {}).get("key", ""))]
        for ancestor in content.get("ancestors") or []:
            layer = self.restriction(str(ancestor["id"]))
            if layer is not None:
                layers.append(layer)
        own = self.names.restriction_layer((content.get("restrictions") or {}).get("read"))
        if own is not None:
            layers.append(own)
        members = {group: self.members(group) for group in groups_named(layers)}
        flattened = flatten_layers(layers, members)
        # a user whose group is itself in the list adds nothing to "any of" (and a big group would add thousands)
        covered = set().union(*(members.get(principal, set()) for principal in flattened))
        return [principal for principal in flattened if principal not in covered]


def storage_text(storage: str) -> str:
    """Plain text of a page in Confluence's storage format (XHTML): one line per block, inline markup joined."""
    marked = _BLOCK_END.sub(lambda match: "\n" + match.group(1), storage)
    body = LexborHTMLParser(f"<html><body>{marked}</body></html>").body
    raw = body.text(separator="") if body is not None else ""
    lines = (" ".join(line.split()) for line in raw.splitlines())
    return "\n".join(line for line in lines if line)


def _transient(error: Exception) -> float | bool | None:
    """Seconds a retryable answer asks to wait (``True``: back off), ``None`` for a final answer."""
    if isinstance(error, requests.HTTPError) and error.response is not None:
        if error.response.status_code not in _TRANSIENT:
            return None
        return retry_after_seconds(error.response.headers.get("Retry-After")) or True
    return True if isinstance(error, requests.ConnectionError | requests.Timeout) else None


def _read_cursor(cursor: Any | None) -> datetime | None:
    if cursor is None:
        return None
    if not isinstance(cursor, dict) or "since" not in cursor:
        raise InvalidInputError(f"Confluence cursor {cursor!r} is not one this connector wrote; reset the cursor.")
    return datetime.fromisoformat(cursor["since"]) if cursor["since"] else None
