"""Access control as the domain sees it: documents carry ACL groups, callers search with theirs.

Every caller belongs to ``PUBLIC_GROUP``; a document that names no groups is public. The groups are a condition of
the index query itself (``ferret.core.search``), never a filter applied to results afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

PUBLIC_GROUP = "public"
"""ACL group every caller belongs to; a document without explicit groups is public."""


def search_groups(groups: Iterable[str]) -> list[str]:
    """The groups a caller searches with: its own plus ``PUBLIC_GROUP``, sorted, without duplicates."""
    return sorted({*groups, PUBLIC_GROUP})


def may_read(groups: Collection[str], document_groups: Iterable[str]) -> bool:
    """Whether a caller searching with ``groups`` (``search_groups``) may read a document shared with
    ``document_groups``: one group in common. The same rule the index query applies."""
    return not set(groups).isdisjoint(document_groups)
