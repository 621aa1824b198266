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
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.acl import PUBLIC_GROUP
from ferret.core.db.audit import SYSTEM_ACTOR, record_event
from ferret.core.db.models import ApiKey, ApiKeyScope, utcnow
from ferret.core.errors import ConflictError, ForbiddenError, InvalidInputError, NotFoundError

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
        raise InvalidInputError(f"Unknown scope {unknown[0]!r}; use search, ingest, admin or owner.")
    if not scopes:
        raise InvalidInputError("An API key needs at least one scope: search, ingest, admin or owner.")
    return sorted(set(scopes))


def parse_acl_groups(groups: Sequence[str]) -> list[str]:
    cleaned = sorted({group.strip() for group in groups})
    for group in cleaned:
        if not group or len(group) > _GROUP_MAX:
            raise InvalidInputError(f"ACL group {group!r} must be 1-{_GROUP_MAX} characters.")
    return [group for group in cleaned if group != PUBLIC_GROUP]  # every caller is public anyway


IMPLIED_BY: dict[ApiKeyScope, frozenset[str]] = {
    ApiKeyScope.SEARCH: frozenset({"search", "admin", "owner"}),
    ApiKeyScope.INGEST: frozenset({"ingest", "admin", "owner"}),
    ApiKeyScope.ADMIN: frozenset({"admin", "owner"}),
    ApiKeyScope.OWNER: frozenset({"owner"}),
}
"""The scopes that grant each scope: ``owner`` implies ``admin``, which implies ``search`` and ``ingest``."""


def scopes_grant(scopes: Sequence[str] | frozenset[str], scope: ApiKeyScope) -> bool:
    return not IMPLIED_BY[scope].isdisjoint(scopes)


def has_scope(key: ApiKey, scope: ApiKeyScope) -> bool:
    return scopes_grant(key.scopes, scope)


@dataclass(frozen=True)
class KeyManager:
    """Who manages keys: an owner may grant anything; an admin only what it holds itself.

    Why: an admin key that could mint a key for any group would read every group (issue 11), so key management is
    a narrower power than running the platform. ``None`` groups mean an owner, or the CLI at the machine itself
    (which can read the database file anyway)."""

    actor: str
    groups: frozenset[str] | None

    @classmethod
    def of_key(cls, actor: str, scopes: Sequence[str] | frozenset[str], groups: Sequence[str]) -> KeyManager:
        return cls(actor, None if scopes_grant(scopes, ApiKeyScope.OWNER) else frozenset(groups))

    def may_manage(self, scopes: Sequence[str], groups: Sequence[str]) -> bool:
        if self.groups is None:
            return True
        return ApiKeyScope.OWNER.value not in scopes and set(groups) <= self.groups

    def check(self, verb: str, name: str, scopes: Sequence[str], groups: Sequence[str]) -> None:
        if self.may_manage(scopes, groups):
            return
        if ApiKeyScope.OWNER.value in scopes:
            raise ForbiddenError(f"Only an owner key can {verb} the owner key {name!r}.")
        extra = ", ".join(sorted(set(groups) - (self.groups or frozenset())))
        raise ForbiddenError(
            f"This key cannot {verb} API key {name!r}: it holds group(s) {extra} that this key does not; "
            "use an owner key or `ferret apikey` on the server."
        )


LOCAL_MANAGER = KeyManager(SYSTEM_ACTOR, None)


def create_api_key(
    session: Session,
    name: str,
    scopes: Sequence[str],
    acl_groups: Sequence[str] = (),
    *,
    manager: KeyManager = LOCAL_MANAGER,
) -> tuple[ApiKey, str]:
    """A new key row and its plaintext, which is shown once and never stored; audited as ``manager.actor``."""
    if not name or len(name) > 128 or not set(name) <= _NAME_CHARS or name[0] in "-_.":
        raise InvalidInputError(
            f"API key name {name!r} is not valid; use 1-128 lowercase letters, digits, '-', '_' or '.'."
        )
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise ConflictError(f"An API key named {name!r} already exists; choose another name.")
    manager.check("create", name, parse_scopes(scopes), parse_acl_groups(acl_groups))
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
    record_event(session, manager.actor, "apikey.create", name, {"scopes": key.scopes, "acl_groups": key.acl_groups})
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


def list_api_keys(
    session: Session, *, include_revoked: bool = False, manager: KeyManager = LOCAL_MANAGER
) -> list[ApiKey]:
    """The keys ``manager`` may manage (an admin does not learn of keys beyond its groups)."""
    query = select(ApiKey).order_by(ApiKey.name)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return [key for key in session.scalars(query) if manager.may_manage(key.scopes, key.acl_groups)]


def get_api_key(session: Session, name: str) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if key is None:
        raise NotFoundError(
            f"API key {name!r} does not exist; `ferret apikey list` shows the keys.",
            over_http=f"API key {name!r} does not exist; GET /v1/api-keys lists the keys.",
        )
    return key


def revoke_api_key(session: Session, name: str, *, manager: KeyManager = LOCAL_MANAGER) -> ApiKey:
    """Revoke a key for good; revoking it again changes nothing. A key beyond ``manager``'s groups is refused."""
    key = get_api_key(session, name)
    if not manager.may_manage(key.scopes, key.acl_groups):
        manager.check("revoke", name, key.scopes, key.acl_groups)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        record_event(session, manager.actor, "apikey.revoke", name)
        session.flush()
    return key
