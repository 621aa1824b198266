"""Limits on what one document may carry into the index, checked at every entry (connectors, push API, builds).

Why: every field of a document ends up in the payload of its index points, and the index engine must read that
payload back for the life of the version. Qdrant Edge accepts a point whose metadata is nested ~125 levels deep,
then cannot read its own write-ahead log once the shard is reopened (serde's recursion limit), so a single pushed
document made a whole corpus unusable. These limits sit far below what the engine tolerates and far above what a
real source sends (the filesystem connector sends 4 flat keys; BEIR none).

The checks are plain functions without recursion (an explicit stack), so a hostile value cannot exhaust Python's
stack while it is being judged, and they return the reason as one sentence instead of raising, so each entry
decides what a violation means: 422 in the push API, a skipped item in a connector, quarantine in a build.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

MAX_METADATA_DEPTH = 8
"""Nesting of objects and lists inside ``metadata``: ``{"a": 1}`` is depth 1, ``{"a": {"b": [1]}}`` depth 3."""
MAX_METADATA_KEYS = 256
"""Keys over all levels of ``metadata``."""
MAX_METADATA_ITEMS = 4_096
"""Values over all levels (list items included), so a wide list cannot stand in for many keys."""
MAX_METADATA_BYTES = 64 * 1024
"""``metadata`` as compact JSON."""
MAX_KEY_CHARS = 128
MAX_EXTERNAL_ID_CHARS = 1_024
MAX_SOURCE_CHARS = 256
MAX_TITLE_CHARS = 4_096
MAX_TEXT_CHARS = 10_000_000
MAX_ACL_GROUPS = 64
MAX_GROUP_CHARS = 128


def scalar_problem(value: Any) -> str | None:
    """Why one JSON scalar cannot be stored in the database and the index (PostgreSQL refuses NUL; UTF-8 refuses
    lone surrogates; payload integers are 64-bit), or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if "\x00" in value:
            return "text must not contain NUL characters"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "text must not contain unpaired surrogates"
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**63 else "integers must fit in 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite"
    return f"values must be JSON (text, numbers, booleans, null, lists, objects), not {type(value).__name__}"


def metadata_problem(metadata: Any) -> str | None:
    """Why ``metadata`` cannot be indexed, as a sentence fragment, or None when it is within every limit."""
    if not isinstance(metadata, dict):
        return "metadata must be an object"
    keys = items = 0
    stack: list[tuple[Any, int]] = [(metadata, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > MAX_METADATA_DEPTH:
                return f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels"
            keys += len(value)
            if keys > MAX_METADATA_KEYS:
                return f"metadata has more than {MAX_METADATA_KEYS} keys in all"
            for key, item in value.items():
                if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
                    return f"metadata keys must be text of 1 to {MAX_KEY_CHARS} characters"
                reason = scalar_problem(key)
                if reason is not None:
                    return f"metadata {reason}"
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            if depth > MAX_METADATA_DEPTH:
                return f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels"
            stack.extend((item, depth + 1) for item in value)
        else:
            reason = scalar_problem(value)
            if reason is not None:
                return f"metadata {reason}"
        items += 1
        if items > MAX_METADATA_ITEMS:
            return f"metadata has more than {MAX_METADATA_ITEMS} values in all"
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        return f"metadata takes {size:,} bytes as JSON, more than the limit of {MAX_METADATA_BYTES:,}"
    return None


def _text_problem(name: str, value: str, limit: int, *, required: bool = False) -> str | None:
    if required and not value:
        return f"{name} must not be empty"
    if len(value) > limit:
        return f"{name} has {len(value):,} characters, more than the limit of {limit:,}"
    reason = scalar_problem(value)
    return None if reason is None else f"{name}: {reason}"


def document_problem(
    *,
    external_id: str,
    title: str,
    text: str,
    source: str,
    metadata: Any,
    acl_groups: Sequence[str],
) -> str | None:
    """Why a document cannot be indexed, or None: every field that becomes part of a point's payload."""
    checks = (
        _text_problem("the external id", external_id, MAX_EXTERNAL_ID_CHARS, required=True),
        _text_problem("the source name", source, MAX_SOURCE_CHARS, required=True),
        _text_problem("the title", title, MAX_TITLE_CHARS),
        _text_problem("the text", text, MAX_TEXT_CHARS),
    )
    for reason in checks:
        if reason is not None:
            return reason
    if len(acl_groups) > MAX_ACL_GROUPS:
        return f"a document has {len(acl_groups)} ACL groups, more than the limit of {MAX_ACL_GROUPS}"
    for group in acl_groups:
        if not isinstance(group, str):
            return "ACL groups must be text"
        reason = _text_problem("an ACL group", group, MAX_GROUP_CHARS, required=True)
        if reason is not None:
            return reason
    return metadata_problem(metadata)
