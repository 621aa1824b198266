"""Who may read a SharePoint item: its Graph permissions (``GET /drives/{d}/items/{i}/permissions``) as principals.

Graph lists an item's effective permissions, inherited ones included (``inheritedFrom``), so one call per item is
the whole answer. Every role (read, write, owner) can read. Each permission names identities in ``grantedToV2``
(one) or ``grantedToIdentitiesV2`` (a sharing link given to several people), or is a sharing link whose scope
decides: ``anonymous`` and ``organization`` links make the item public.

- a user becomes ``user:<email>`` (``email``, else the login name's address part, else the object id);
- an Entra group becomes ``<source>:group:<object id>``; its ``transitiveMembers`` are the memberships the
  connector reports, so API keys of its members search as the group;
- a SharePoint site group becomes ``<source>:group:site:<name>`` (Graph does not list its members: configure them);
- "Everyone" and "Everyone except external users" (the ``spo-grid-all-users`` claim) are public.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ferret.core.sources.principals import PUBLIC, group_principal, user_principal

PUBLIC_LINK_SCOPES = frozenset({"anonymous", "organization"})
_EVERYONE_CLAIMS = ("spo-grid-all-users", "c:0(.s|true")
"""Login-name claims of "Everyone except external users" and "Everyone"."""


def item_principals(permissions: Iterable[Mapping[str, Any]], source: str, public_names: Iterable[str]) -> list[str]:
    """Sorted principals of an item's permission list; ``["public"]`` when anyone in the organisation may read."""
    names = frozenset(name.lower() for name in public_names)
    found: set[str] = set()
    for permission in permissions:
        if not permission.get("roles"):
            continue  # a role-less entry (e.g. the marker of broken inheritance) grants nothing
        if (permission.get("link") or {}).get("scope") in PUBLIC_LINK_SCOPES:
            return [PUBLIC]
        identity_sets = [permission.get("grantedToV2") or permission.get("grantedTo")]
        identity_sets += permission.get("grantedToIdentitiesV2") or permission.get("grantedToIdentities") or []
        for identity_set in identity_sets:
            for principal in _identity_principals(identity_set or {}, source, names):
                if principal == PUBLIC:
                    return [PUBLIC]
                found.add(principal)
    return sorted(found)


def entra_groups(principals: Iterable[str], source: str) -> set[str]:
    """The Entra group ids among principals (site groups excluded: Graph cannot list their members)."""
    prefix = group_principal(source, "x")[:-1]
    return {p[len(prefix) :] for p in principals if p.startswith(prefix) and not p[len(prefix) :].startswith("site:")}


def _identity_principals(identity_set: Mapping[str, Any], source: str, public_names: frozenset[str]) -> Iterator[str]:
    for kind in ("user", "siteUser"):
        identity = identity_set.get(kind)
        if identity:
            login = str(identity.get("loginName") or "")
            if str(identity.get("displayName") or "").lower() in public_names or any(
                c in login for c in _EVERYONE_CLAIMS
            ):
                yield PUBLIC
                continue
            address = identity.get("email") or (login.rsplit("|", 1)[-1] if "@" in login else "") or identity.get("id")
            if address:
                yield user_principal(str(address))
    if identity_set.get("group", {}).get("id"):
        yield group_principal(source, str(identity_set["group"]["id"]))
    site_group = identity_set.get("siteGroup") or {}
    if site_group.get("displayName"):
        name = str(site_group["displayName"])
        yield PUBLIC if name.lower() in public_names else group_principal(source, f"site:{name}")
