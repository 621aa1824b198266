"""Turning a source's own permission names into principals, shared by the connectors that map names by config.

A name that already is a principal (``public``, ``user:<email>``, ``<source>:group:<name>``) is kept as is; an
e-mail address becomes ``user:<email>``; any other name is a group of the source (``<source>:group:<name>``). An
empty list means public: a source that states no permission is readable by everyone who can reach it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatch

from ferret.core.sources.principals import GROUP_INFIX, PUBLIC, USER_PREFIX, group_principal, user_principal


def principal(source: str, name: str) -> str:
    name = name.strip()
    if name == PUBLIC or name.startswith(USER_PREFIX) or GROUP_INFIX in name:
        return name
    if "@" in name:
        return user_principal(name)
    return group_principal(source, name)


def principals_for(source: str, names: Iterable[str]) -> list[str]:
    found = sorted({principal(source, name) for name in names if name and name.strip()})
    return found or [PUBLIC]


def first_match(source: str, key: str, patterns: Mapping[str, list[str]], *, prefix: bool = False) -> list[str]:
    """The principals of the first pattern matching ``key`` (``fnmatch`` glob, or a plain prefix with ``prefix``);
    public when none matches."""
    for pattern, names in patterns.items():
        if key.startswith(pattern) if prefix else fnmatch(key, pattern):
            return principals_for(source, names)
    return [PUBLIC]
