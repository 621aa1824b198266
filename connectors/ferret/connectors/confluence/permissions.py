"""Who may read a Confluence page: the space's VIEW layer and the page's read restrictions, as principals.

Confluence lets a user see a page when the space grants them VIEW (``read`` on the space) *and* they satisfy the read
restriction of the page and of every restricted ancestor (view restrictions are inherited, so the nearest
restriction is in practice the narrowest one, but an ancestor's still applies). Each layer lists users and groups;
a page or ancestor without a restriction adds no layer, and anonymous access to a space makes that layer public.
``ferret.core.sources.principals.flatten_layers`` turns the layers into one "any of" list, using the group members
the connector read from Confluence (a user named on the page passes the space layer through one of their groups).

Principals: ``public``, ``<source>:group:<name>``, and ``user:<username>@<email_domain>`` for users (Data Center's
REST API does not show e-mail addresses), or ``user:<username>`` when no domain is configured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ferret.core.sources.principals import PUBLIC, group_principal, user_principal


class PrincipalNames:
    """Turns Confluence usernames and group names into principals of one source."""

    def __init__(self, source: str, email_domain: str | None, public_groups: Iterable[str] = ()) -> None:
        self.source = source
        self.email_domain = email_domain
        self.public_groups = frozenset(public_groups)

    def user(self, username: str) -> str:
        return user_principal(f"{username}@{self.email_domain}" if self.email_domain else username)

    def group(self, name: str) -> str:
        return group_principal(self.source, name)

    def space_layer(self, space: Mapping[str, Any]) -> set[str]:
        """The VIEW layer of a space from ``GET /rest/api/space/{key}?expand=permissions``."""
        layer: set[str] = set()
        for permission in space.get("permissions") or []:
            operation = permission.get("operation") or {}
            if operation.get("operation") != "read" or operation.get("targetType") != "space":
                continue
            if permission.get("anonymousAccess"):
                layer.add(PUBLIC)
            subjects = permission.get("subjects") or {}
            for user in (subjects.get("user") or {}).get("results", []):
                layer.add(self.user(user["username"]))
            for group in (subjects.get("group") or {}).get("results", []):
                layer.add(PUBLIC if group["name"] in self.public_groups else self.group(group["name"]))
        return layer

    def restriction_layer(self, read: Mapping[str, Any] | None) -> set[str] | None:
        """A read restriction (a ``restrictions.read`` expansion, or the ``read`` entry of ``byOperation``);
        ``None`` when there is none, so the page adds no layer."""
        restriction = (read or {}).get("restrictions") or {}
        layer = {self.user(user["username"]) for user in (restriction.get("user") or {}).get("results", [])}
        layer |= {self.group(group["name"]) for group in (restriction.get("group") or {}).get("results", [])}
        return layer or None


def groups_named(layers: Iterable[set[str]]) -> set[str]:
    """The group principals the layers mention (their members are needed to flatten them)."""
    return {principal for layer in layers for principal in layer if ":group:" in principal}
