"""Prefixed principals: who may see a document, as strings the Qdrant filter matches with "any of".

- ``public``: everyone (every caller searches with it);
- ``user:<email>``: one person, the same across sources;
- ``<source>:group:<name>``: a group as one source knows it (``confluence:group:eng`` and ``smb:group:eng`` are
  different groups: a group the system never heard of matches nobody).

Names without a prefix (``hr``) remain valid: they are the groups of the filesystem connector's ``acl`` map and of
push clients written before principals existed.

Sources with two permission layers (Confluence space VIEW and the nearest page read restriction; an SMB share ACL
and a file DACL) need a reader to pass *both*, while the index filter is "any of" over one list. ``flatten_layers``
computes that list at index time: the principals both layers name, plus every user who belongs (through the
source's group memberships) to an allowed principal of each layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ferret.core.errors import InvalidInputError

PUBLIC = "public"
USER_PREFIX = "user:"
GROUP_INFIX = ":group:"
MAX_PRINCIPAL_CHARS = 256


def user_principal(email: str) -> str:
    """``user:<email>``, lower-cased: mail addresses are case-insensitive in practice."""
    email = email.strip().lower()
    if not email:
        raise InvalidInputError("A user principal needs a non-empty e-mail or login.")
    return f"{USER_PREFIX}{email}"


def group_principal(source: str, name: str) -> str:
    """``<source>:group:<name>``: a group of one source."""
    if not source or ":" in source:
        raise InvalidInputError(f"Source name {source!r} cannot prefix a group: it must be non-empty without ':'.")
    if not name.strip():
        raise InvalidInputError(f"A group of source {source!r} needs a non-empty name.")
    return f"{source}{GROUP_INFIX}{name.strip()}"


def is_group(principal: str) -> bool:
    return GROUP_INFIX in principal


def validate_principal(principal: str) -> str:
    """The principal itself, or a one-sentence error naming the accepted forms."""
    if not principal or len(principal) > MAX_PRINCIPAL_CHARS or principal != principal.strip():
        raise InvalidInputError(
            f"Principal {principal!r} is not valid; use 'public', 'user:<email>' or '<source>:group:<name>' "
            f"(at most {MAX_PRINCIPAL_CHARS} characters, no surrounding spaces)."
        )
    if principal.startswith(USER_PREFIX) and len(principal) == len(USER_PREFIX):
        raise InvalidInputError("Principal 'user:' names nobody; write 'user:<email>'.")
    if GROUP_INFIX in principal:
        source, _, name = principal.partition(GROUP_INFIX)
        if not source or not name:
            raise InvalidInputError(f"Principal {principal!r} is not valid; a group is '<source>:group:<name>'.")
    return principal


def normalize(principals: Iterable[str]) -> list[str]:
    """Sorted, unique, validated; an empty list stays empty (nobody but admins-of-the-data can see it)."""
    return sorted({validate_principal(principal) for principal in principals})


def flatten_layers(layers: Sequence[Iterable[str]], members: Mapping[str, Iterable[str]] | None = None) -> list[str]:
    """One "any of" principal list equivalent to "allowed by every layer".

    A layer that contains ``public`` restricts nothing and is dropped. Of the rest, a principal named by every
    layer is kept as is; a user is added when, for each layer, the user is named by it or is a (transitive)
    member of a group it names. A group named by one layer only is not kept: its members who fail another layer
    must not see the document. With no restricting layer left the document is public.

    Example:
        >>> flatten_layers([["c:group:eng", "c:group:ops"], ["c:group:eng", "user:ann@x.org"]],
        ...                {"c:group:ops": ["user:ann@x.org"]})
        ['c:group:eng', 'user:ann@x.org']
    """
    restricting = [set(layer) for layer in layers if PUBLIC not in set(layer)]
    if not restricting:
        return [PUBLIC]
    common = set.intersection(*restricting)
    users: set[str] | None = None
    for layer in restricting:
        expanded = {principal for principal in _expand(layer, members or {}) if principal.startswith(USER_PREFIX)}
        users = expanded if users is None else users & expanded
    return sorted(common | (users or set()))


def _expand(principals: Iterable[str], members: Mapping[str, Iterable[str]]) -> set[str]:
    """The principals and, transitively, every member of the groups among them (cycles are harmless)."""
    seen: set[str] = set()
    pending = list(principals)
    while pending:
        principal = pending.pop()
        if principal in seen:
            continue
        seen.add(principal)
        pending.extend(members.get(principal, ()))
    return seen
