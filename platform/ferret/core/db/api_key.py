"""Queries on API keys: created once with their plaintext shown to the caller, then only ever looked up by hash.

A key reads ``fk_<prefix>_<secret>``. The prefix is public (it appears in listings and logs, so an operator can
tell keys apart); the database stores only the SHA-256 of the whole key. A lookup finds the few rows with that
prefix through an index and compares hashes in constant time, so timing reveals nothing about stored hashes.

Example:
    >>> row, key = create_api_key(session, "search-portal", ["search"], ["hr"])
    >>> find_api_key_by_plaintext(session, key).name
    'search-portal'
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.acl import PUBLIC_GROUP
from ferret.core.db.models import ApiKey, ApiKeyScope, utcnow
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError

KEY_PREFIX = "fk"
_PREFIX_BYTES = 4  # 8 hex characters: enough to tell keys apart, far too few to guess a key
_SECRET_BYTES = 32
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_GROUP_MAX = 128
LAST_USED_RESOLUTION = timedelta(minutes=5)
"""``last_used_at`` is written at most this often per key, so authenticating a search rarely writes."""


def hash_api_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


def split_api_key(plaintext: str) -> str | None:
    """The public prefix of a well-formed key, else None (the secret may itself contain '_')."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or len(parts[1]) != 2 * _PREFIX_BYTES or not parts[2]:
        return None
    return parts[1]


def parse_scopes(scopes: Sequence[str]) -> list[str]:
    known = {scope.value for scope in ApiKeyScope}
    unknown = sorted(set(scopes) - known)
    if unknown:
        raise InvalidInputError(f"Unknown scope {unknown[0]!r}; use search, ingest or admin.")
    if not scopes:
        raise InvalidInputError("An API key needs at least one scope: search, ingest or admin.")
    return sorted(set(scopes))


def parse_acl_groups(groups: Sequence[str]) -> list[str]:
    cleaned = sorted({group.strip() for group in groups})
    for group in cleaned:
        if not group or len(group) > _GROUP_MAX:
            raise InvalidInputError(f"ACL group {group!r} must be 1-{_GROUP_MAX} characters.")
    return [group for group in cleaned if group != PUBLIC_GROUP]  # every caller is public anyway


def has_scope(key: ApiKey, scope: ApiKeyScope) -> bool:
    """``admin`` implies every other scope."""
    return scope.value in key.scopes or ApiKeyScope.ADMIN.value in key.scopes


def create_api_key(
    session: Session, name: str, scopes: Sequence[str], acl_groups: Sequence[str] = ()
) -> tuple[ApiKey, str]:
    """A new key row and its plaintext, which is shown once and never stored."""
    if not name or len(name) > 128 or not set(name) <= _NAME_CHARS or name[0] in "-_.":
        raise InvalidInputError(
            f"API key name {name!r} is not valid; use 1-128 lowercase letters, digits, '-', '_' or '.'."
        )
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise ConflictError(f"An API key named {name!r} already exists; choose another name.")
    prefix = secrets.token_hex(_PREFIX_BYTES)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    key = ApiKey(
        name=name,
        prefix=prefix,
        key_hash=hash_api_key(plaintext),
        scopes=parse_scopes(scopes),
        acl_groups=parse_acl_groups(acl_groups),
    )
    session.add(key)
    session.flush()
    return key, plaintext


def find_api_key_by_plaintext(session: Session, plaintext: str) -> ApiKey | None:
    """The live (not revoked) key with this plaintext, or None."""
    prefix = split_api_key(plaintext)
    if prefix is None:
        return None
    wanted = hash_api_key(plaintext)
    found: ApiKey | None = None
    for candidate in session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)):
        # Every candidate is compared, in constant time, whatever matched before.
        if hmac.compare_digest(candidate.key_hash, wanted):
            found = candidate
    if found is None or found.revoked_at is not None:
        return None
    return found


def touch_api_key(key: ApiKey) -> bool:
    """Record a use; True when the row changed (at most once per ``LAST_USED_RESOLUTION``)."""
    now = utcnow()
    last = key.last_used_at
    if last is not None and last.tzinfo is None:  # SQLite hands back naive datetimes
        last = last.replace(tzinfo=now.tzinfo)
    if last is not None and now - last < LAST_USED_RESOLUTION:
        return False
    key.last_used_at = now
    return True


def list_api_keys(session: Session, *, include_revoked: bool = False) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.name)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return list(session.scalars(query))


def get_api_key(session: Session, name: str) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if key is None:
        raise NotFoundError(f"API key {name!r} does not exist; `ferret apikey list` shows the keys.")
    return key


def revoke_api_key(session: Session, name: str) -> ApiKey:
    """Revoke a key for good; revoking it again changes nothing."""
    key = get_api_key(session, name)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key
