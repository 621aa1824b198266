"""API keys over HTTP, for admins: list, create (the key is shown once), revoke. Same rules as `ferret apikey`, plus
one: an admin key manages only keys within its own groups; an owner key manages any (``KeyManager``)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, status

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep
from ferret.api.errors import error_responses
from ferret.api.schemas import ApiKeyCreated, ApiKeyIn, ApiKeyList, ApiKeyOut
from ferret.core.db.api_key import create_api_key, list_api_keys, revoke_api_key
from ferret.core.db.models import ApiKey
from ferret.core.errors import ConflictError

router = APIRouter(tags=["API keys"])


def api_key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut.model_validate(key)


@router.get("/v1/api-keys", response_model=ApiKeyList, responses=error_responses(401, 403), summary="List API keys")
def list_all(
    caller: AdminCaller,
    session: SessionDep,
    include_revoked: bool = Query(default=False, description="Also list revoked keys."),
) -> ApiKeyList:
    """Keys by name, without their secrets (only a SHA-256 of each is stored); an admin key sees the keys within
    its groups."""
    keys = list_api_keys(session, include_revoked=include_revoked, manager=caller.key_manager)
    return ApiKeyList(keys=[api_key_out(key) for key in keys])


@router.post(
    "/v1/api-keys",
    response_model=ApiKeyCreated,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 409, 413, 422),
    summary="Create an API key",
)
def create(body: ApiKeyIn, caller: AdminCaller, session: SessionDep) -> ApiKeyCreated:
    """The answer carries the key itself, once: store it now, it cannot be shown again. An admin key grants only
    groups it has itself (403 otherwise); an owner key grants any."""
    scopes = [scope.value for scope in body.scopes]
    key, plaintext = create_api_key(session, body.name, scopes, body.acl_groups, manager=caller.key_manager)
    session.commit()
    return ApiKeyCreated(**api_key_out(key).model_dump(), key=plaintext)


@router.delete(
    "/v1/api-keys/{name}",
    response_model=ApiKeyOut,
    responses=error_responses(401, 403, 404, 409),
    summary="Revoke an API key",
)
def revoke(caller: AdminCaller, session: SessionDep, name: str = Path(max_length=128)) -> ApiKeyOut:
    """Revoked for good: the key is refused from the next request on. Revoking it again changes nothing."""
    if name == caller.name:
        raise ConflictError(f"API key {name!r} is the key of this request; revoke it with another admin key.")
    key = revoke_api_key(session, name, manager=caller.key_manager)
    session.commit()
    return api_key_out(key)
