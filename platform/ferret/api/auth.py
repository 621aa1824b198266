"""API key authentication: ``Authorization: Bearer fk_…`` or ``X-API-Key: fk_…``, then a scope check.

A missing, unknown or revoked key gets 401; a valid key without the route's scope gets 403. The key is found by
the SHA-256 of its plaintext (``ferret.core.db.api_key``); nothing else about it is ever compared.

Access control on search: a caller's groups are its key's ``acl_groups`` plus ``public``, and search passes them to
Qdrant as a filter condition. Admin keys get no exemption: the admin scope is for running the platform (corpora,
tasks, jobs, index versions), not for reading every group's documents. Key management is narrower still: an admin
key creates, lists and revokes only keys within its own groups (``KeyManager``), so it cannot mint itself a way into
another group; only an ``owner`` key (or ``ferret apikey`` at the server) grants any group. A leaked admin key
therefore reads no more than its groups allow.

Example:
    >>> @router.get("/v1/things")
    ... def things(caller: Annotated[Caller, Depends(require(ApiKeyScope.ADMIN))]) -> ...
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Security, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ferret.api.dependencies import SessionDep
from ferret.core.acl import PUBLIC_GROUP
from ferret.core.db.api_key import KeyManager, find_api_key_by_plaintext, scopes_grant, touch_api_key
from ferret.core.db.audit import key_actor
from ferret.core.db.models import ApiKeyScope
from ferret.core.db.source import expand_principals

bearer_scheme = HTTPBearer(
    auto_error=False, scheme_name="BearerKey", description="An API key: `Authorization: Bearer fk_<prefix>_<secret>`."
)
header_scheme = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="ApiKeyHeader", description="An API key in the X-API-Key header."
)


@dataclass(frozen=True)
class Caller:
    """Who is calling: the key's name, scopes and ACL groups (``public`` not included)."""

    key_id: int
    name: str
    scopes: frozenset[str]
    acl_groups: tuple[str, ...]

    @property
    def key_manager(self) -> KeyManager:
        return KeyManager.of_key(key_actor(self.name), self.scopes, self.acl_groups)

    @property
    def search_groups(self) -> list[str]:
        """The groups a search of this caller may see: its own and ``public``."""
        return sorted({*self.acl_groups, PUBLIC_GROUP})


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"})


def authenticate(
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)],
    header_key: Annotated[str | None, Security(header_scheme)],
) -> Caller:
    plaintext = bearer.credentials if bearer is not None else header_key
    if not plaintext:
        raise _unauthorized("This request needs an API key: send `Authorization: Bearer <key>` or `X-API-Key`.")
    key = find_api_key_by_plaintext(session, plaintext.strip())
    if key is None:
        raise _unauthorized("The API key is unknown or revoked; ask an administrator for a valid key.")
    # A key naming a user (or a group) also searches as the external groups the sources say it belongs to.
    caller = Caller(key.id, key.name, frozenset(key.scopes), tuple(expand_principals(session, key.acl_groups)))
    if touch_api_key(key):
        session.commit()
    # Give the connection back to the pool now: a search holds none while it waits for the query batcher and Qdrant
    # (the session reconnects if the route uses it). Held for the whole request, 15 concurrent searches took the
    # pool's 15 connections and each waited for a second one to read the active search configuration: every
    # request failed after 30 s at 32 clients (benchmarks/RESULTS.md, issue 16).
    session.close()
    return caller


def require(scope: ApiKeyScope) -> Callable[[Caller], Awaitable[Caller]]:
    """A dependency that authenticates the caller and checks one scope (``owner`` ⊃ ``admin`` ⊃ the others)."""

    async def check(caller: Annotated[Caller, Depends(authenticate)]) -> Caller:  # no I/O: stays on the event loop
        if not scopes_grant(caller.scopes, scope):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                detail=f"The API key {caller.name!r} lacks the {scope.value!r} scope this request needs.",
            )
        return caller

    return check


SearchCaller = Annotated[Caller, Depends(require(ApiKeyScope.SEARCH))]
IngestCaller = Annotated[Caller, Depends(require(ApiKeyScope.INGEST))]
AdminCaller = Annotated[Caller, Depends(require(ApiKeyScope.ADMIN))]
