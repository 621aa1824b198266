"""A stateful stub of the Confluence Data Center REST endpoints that atlassian-python-api calls.

No Confluence server installs here, so the connector's tests run the real client against this FastAPI app. It
keeps spaces, pages (versions, parents, read restrictions), groups and users in memory and answers in the shapes
of the documented REST API (``/rest/api``): content with ``expand`` (body.storage, version, ancestors, space,
restrictions.read.restrictions.user/group), CQL search over ``type``, ``space`` and ``lastmodified`` with
``start``/``limit`` and ``_links.next``, content restrictions by operation, space permissions
(``/rest/api/space/{key}?expand=permissions``), group members with paging, basic auth, and 429 with Retry-After.

As in Confluence, editing a page bumps its version and ``lastmodified``; changing a restriction or a space
permission does not, which is why the connector has a separate permission pass.
"""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

USERNAME = "ferret-bot"
PASSWORD = "bot-token"
_CQL_CLAUSE = re.compile(
    r"^(?:type\s*=\s*(?P<type>\w+)"
    r'|space\s*=\s*"(?P<space>[^"]+)"'
    r"|space\s+in\s*\((?P<spaces>[^)]*)\)"
    r'|lastmodified\s*(?P<op>>=|>)\s*"(?P<when>\d{4}/\d{2}/\d{2} \d{2}:\d{2})")$',
    re.IGNORECASE,
)


@dataclass
class Page:
    id: str
    space: str
    title: str
    body: str
    parent: str | None
    modified: datetime
    version: int = 1
    read_users: list[str] = field(default_factory=list)
    read_groups: list[str] = field(default_factory=list)


@dataclass
class Space:
    key: str
    name: str
    view_groups: list[str] = field(default_factory=list)
    view_users: list[str] = field(default_factory=list)
    anonymous: bool = False


class ConfluenceStub:
    """The server's state; tests change it through these methods (as an editor in the UI would)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spaces: dict[str, Space] = {}
        self.pages: dict[str, Page] = {}
        self.groups: dict[str, list[str]] = {}
        self.requests: list[str] = []
        self.throttle_next = 0
        self.retry_after = "1"
        self.fail_next: list[int] = []
        self.outage = False
        self._next_id = 1000
        self._last_change = datetime.now(UTC)
        self.app = self._build_app()

    # -- state changes ------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        """The time of a change, at least a millisecond after the previous one (Confluence's precision)."""
        self._last_change = max(datetime.now(UTC), self._last_change + timedelta(milliseconds=1))
        return self._last_change

    def add_space(self, key: str, view_groups: list[str] = (), anonymous: bool = False) -> None:  # type: ignore[assignment]
        with self.lock:
            self.spaces[key] = Space(key, f"Space {key}", list(view_groups), [], anonymous)

    def set_space_view(self, key: str, groups: list[str], users: list[str] = (), anonymous: bool = False) -> None:  # type: ignore[assignment]
        with self.lock:
            space = self.spaces[key]
            space.view_groups, space.view_users, space.anonymous = list(groups), list(users), anonymous

    def add_page(self, space: str, title: str, body: str, parent: str | None = None) -> str:
        with self.lock:
            self._next_id += 1
            page_id = str(self._next_id)
            self.pages[page_id] = Page(page_id, space, title, body, parent, self._now())
            return page_id

    def edit_page(self, page_id: str, *, title: str | None = None, body: str | None = None) -> None:
        with self.lock:
            page = self.pages[page_id]
            page.title = title if title is not None else page.title
            page.body = body if body is not None else page.body
            page.version += 1
            page.modified = self._now()

    def move_page(self, page_id: str, parent: str | None) -> None:
        with self.lock:
            page = self.pages[page_id]
            page.parent = parent
            page.version += 1
            page.modified = self._now()

    def delete_page(self, page_id: str) -> None:
        with self.lock:
            del self.pages[page_id]

    def restrict(self, page_id: str, groups: list[str] = (), users: list[str] = ()) -> None:  # type: ignore[assignment]
        """Set the page's read restriction (empty lists remove it); the page's lastmodified does not move."""
        with self.lock:
            page = self.pages[page_id]
            page.read_groups, page.read_users = list(groups), list(users)

    def add_member(self, group: str, username: str) -> None:
        with self.lock:
            self.groups.setdefault(group, []).append(username)

    # -- JSON shapes ---------------------------------------------------------------------------------------

    def _content(self, page: Page, expand: set[str]) -> dict[str, Any]:
        result: dict[str, Any] = {
            "id": page.id,
            "type": "page",
            "status": "current",
            "title": page.title,
            "_links": {"webui": f"/pages/viewpage.action?pageId={page.id}", "self": f"/rest/api/content/{page.id}"},
            "_expandable": {"body": "", "version": "", "ancestors": "", "space": "", "restrictions": ""},
        }
        if "space" in expand:
            result["space"] = {"key": page.space, "name": self.spaces[page.space].name}
        if "version" in expand:
            result["version"] = {"number": page.version, "when": page.modified.isoformat(timespec="milliseconds")}
        if "body.storage" in expand:
            result["body"] = {"storage": {"value": page.body, "representation": "storage"}}
        if "ancestors" in expand:
            result["ancestors"] = [{"id": a.id, "type": "page", "title": a.title} for a in self._ancestors(page)]
        if any(item.startswith("restrictions.read") for item in expand):
            result["restrictions"] = {"read": self._read_restriction(page)}
        return result

    def _ancestors(self, page: Page) -> list[Page]:
        chain = []
        parent = page.parent
        while parent is not None and parent in self.pages:
            chain.append(self.pages[parent])
            parent = self.pages[parent].parent
        return list(reversed(chain))  # root first, as Confluence lists them

    def _user(self, username: str) -> dict[str, Any]:
        return {"type": "known", "username": username, "userKey": f"key-{username}", "displayName": username.title()}

    def _read_restriction(self, page: Page) -> dict[str, Any]:
        users = [self._user(name) for name in page.read_users]
        groups = [{"type": "group", "name": name} for name in page.read_groups]
        return {
            "operation": "read",
            "restrictions": {
                "user": {"results": users, "start": 0, "limit": 200, "size": len(users)},
                "group": {"results": groups, "start": 0, "limit": 200, "size": len(groups)},
            },
        }

    def _space_permissions(self, space: Space) -> list[dict[str, Any]]:
        read = {"operation": "read", "targetType": "space"}
        permissions: list[dict[str, Any]] = [
            {"operation": read, "subjects": {"group": {"results": [{"type": "group", "name": name}], "size": 1}}}
            for name in space.view_groups
        ]
        permissions += [
            {"operation": read, "subjects": {"user": {"results": [self._user(name)], "size": 1}}}
            for name in space.view_users
        ]
        if space.anonymous:
            permissions.append({"operation": read, "anonymousAccess": True})
        permissions.append(
            {
                "operation": {"operation": "administer", "targetType": "space"},
                "subjects": {"user": {"results": [self._user(USERNAME)], "size": 1}},
            }
        )
        return permissions

    # -- the app -------------------------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def gate(request: Request, call_next: Any) -> Any:
            self.requests.append(request.url.path)
            if self.throttle_next > 0:
                self.throttle_next -= 1
                return JSONResponse(
                    {"message": "Rate limited"}, status_code=429, headers={"Retry-After": self.retry_after}
                )
            if self.fail_next or self.outage:
                status = self.fail_next.pop(0) if self.fail_next else 503
                return JSONResponse({"message": "Server error"}, status_code=status)
            expected = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
            if request.headers.get("authorization") != expected:
                return JSONResponse({"statusCode": 401, "message": "Unauthorized"}, status_code=401)
            return await call_next(request)

        @app.get("/rest/api/content/{page_id}")
        def content(page_id: str, expand: str = "") -> Any:
            with self.lock:
                if page_id not in self.pages:
                    return _not_found(f"No content with id {page_id}")
                return self._content(self.pages[page_id], _expansions(expand))

        @app.get("/rest/api/content/{page_id}/restriction/byOperation")
        def restrictions(page_id: str) -> Any:
            with self.lock:
                if page_id not in self.pages:
                    return _not_found(f"No content with id {page_id}")
                empty = {"user": {"results": [], "size": 0}, "group": {"results": [], "size": 0}}
                read = self._read_restriction(self.pages[page_id])
                return {"read": read, "update": {"operation": "update", "restrictions": empty}}

        @app.get("/rest/api/content")
        def content_list(
            request: Request, spaceKey: str = "", start: int = 0, limit: int = 25, expand: str = ""
        ) -> Any:
            limit = min(limit, 100)
            with self.lock:
                pages = sorted((p for p in self.pages.values() if p.space == spaceKey), key=lambda p: int(p.id))
                results = [self._content(page, _expansions(expand)) for page in pages[start : start + limit]]
                return _paged(request, results, start, limit, len(pages))

        @app.get("/rest/api/search")
        def search(request: Request, cql: str, start: int = 0, limit: int = 25, expand: str = "") -> Any:
            limit = min(limit, 50)
            with self.lock:
                try:
                    matches = self._cql(cql)
                except ValueError as error:
                    return JSONResponse({"statusCode": 400, "message": str(error)}, status_code=400)
                inner = {item[len("content.") :] for item in _expansions(expand) if item.startswith("content.")}
                results = [
                    {
                        "content": self._content(page, inner),
                        "title": page.title,
                        "url": f"/pages/viewpage.action?pageId={page.id}",
                        "lastModified": page.modified.isoformat(timespec="milliseconds"),
                        "entityType": "content",
                    }
                    for page in matches[start : start + limit]
                ]
                return _paged(request, results, start, limit, len(matches), total=True)

        @app.get("/rest/api/space/{key}")
        def space(key: str, expand: str = "") -> Any:
            with self.lock:
                if key not in self.spaces:
                    return _not_found(f"No space with key : {key}")
                result: dict[str, Any] = {"key": key, "name": self.spaces[key].name, "type": "global"}
                if "permissions" in _expansions(expand):
                    result["permissions"] = self._space_permissions(self.spaces[key])
                return result

        @app.get("/rest/api/group/{name}/member")
        def members(request: Request, name: str, start: int = 0, limit: int = 200) -> Any:
            with self.lock:
                if name not in self.groups:
                    return _not_found(f"No group with name {name}")
                users = [self._user(username) for username in self.groups[name]]
                return _paged(request, users[start : start + limit], start, limit, len(users))

        return app

    def _cql(self, cql: str) -> list[Page]:
        """Pages matching a CQL conjunction of type, space and lastmodified clauses (what the connector sends)."""
        query, _, order = cql.partition(" order by ")
        if order and order.strip().lower() not in ("lastmodified", "lastmodified asc"):
            raise ValueError(f"Unsupported order by {order!r}")
        pages = list(self.pages.values())
        for clause in re.split(r"\s+and\s+", query.strip(), flags=re.IGNORECASE):
            match = _CQL_CLAUSE.match(clause.strip())
            if match is None:
                raise ValueError(f"Could not parse cql : {cql}")
            if match["type"]:
                pages = [p for p in pages if match["type"].lower() == "page"]
            elif match["space"]:
                pages = [p for p in pages if p.space == match["space"]]
            elif match["spaces"] is not None:
                keys = {key.strip().strip('"') for key in match["spaces"].split(",")}
                pages = [p for p in pages if p.space in keys]
            else:
                when = datetime.strptime(match["when"], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
                pages = [p for p in pages if (p.modified >= when if match["op"] == ">=" else p.modified > when)]
        return sorted(pages, key=lambda p: (p.modified, int(p.id)))


def _expansions(expand: str) -> set[str]:
    """``a.b.c`` also expands ``a`` and ``a.b``, as Confluence does."""
    result: set[str] = set()
    for item in filter(None, expand.split(",")):
        parts = item.strip().split(".")
        result.update(".".join(parts[: index + 1]) for index in range(len(parts)))
    return result


def _paged(
    request: Request, results: list[Any], start: int, limit: int, size: int, *, total: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {"results": results, "start": start, "limit": limit, "size": len(results), "_links": {}}
    if total:
        body["totalSize"] = size
    if start + limit < size:
        params = {**request.query_params, "start": str(start + limit), "limit": str(limit)}
        body["_links"]["next"] = f"{request.url.path}?{urlencode(params)}"
    return body


def _not_found(message: str) -> JSONResponse:
    return JSONResponse({"statusCode": 404, "message": message}, status_code=404)
