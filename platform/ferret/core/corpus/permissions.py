"""Permission-only updates: new ACL principals written to the database rows and to the payload of every live index
version, without re-chunking or re-embedding anything.

Used by pull ingests, pushes and source syncs alike. The payload is updated before the caller commits; a failure
leaves the database as it was and the payloads possibly ahead of it, which the next sync repairs because it compares
the source's principals with the database's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.index_version import live_index_versions
from ferret.core.db.models import Corpus, Document, Passage
from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import point_id


def apply_permission_changes(
    session: Session, backend: IndexBackend, corpus: Corpus, changes: Mapping[int, Sequence[str]]
) -> int:
    """Set ``acl_groups`` of the given documents (document id -> principals) in the database (flushed, not
    committed) and in every live index version; returns how many documents changed."""
    if not changes:
        return 0
    by_acl: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for document_id, principals in changes.items():
        by_acl[tuple(sorted(set(principals)))].append(document_id)
    versions = live_index_versions(session, corpus)
    for principals, document_ids in by_acl.items():
        for start in range(0, len(document_ids), 500):
            chunk = document_ids[start : start + 500]
            for document in session.scalars(select(Document).where(Document.id.in_(chunk))):
                document.acl_groups = list(principals)
            passage_ids = list(session.scalars(select(Passage.id).where(Passage.document_id.in_(chunk))))
            points = [point_id(corpus.id, passage_id) for passage_id in passage_ids]
            for index_version in versions:
                backend.set_payload(index_version.collection, points, {"acl_groups": list(principals)})
    session.flush()
    return len(changes)
