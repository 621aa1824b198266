"""Writing points without letting one document poison a shard: check, quarantine, and find what the index refuses.

A document reaches a shard only if its stored fields are within ``ferret.core.sources.limits`` (rows written before
the limits existed are checked again here) and the index accepts its points. A document that fails either way is
*quarantined*: ``documents.quarantine_reason`` says why, its passages leave every build and sync, and it stays in
the database where it can be listed and deleted. When the index refuses a batch, the batch is retried document by
document to find the culprit; if every document fails alone too, the fault is the index's (a lost connection, a
full disk), not the data's, and the original error is raised instead of quarantining the corpus. A batch of one
document is blamed on the document only if the index takes a probe with the same vectors and an empty payload.
A quarantined document is tried again whenever its source sends it again: its stored hash and version no longer
match anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace

from ferret.core.db.models import Document, Passage
from ferret.core.errors import FerretError
from ferret.core.index.backend import IndexBackend, UnreadableCollectionError
from ferret.core.index.points import PointBuilder
from ferret.core.index.types import point_id
from ferret.core.sources.limits import document_problem

logger = logging.getLogger(__name__)
_REASON_CHARS = 1_000


def stored_document_problem(document: Document) -> str | None:
    """The payload limits applied to a stored row (which may predate them)."""
    return document_problem(
        external_id=document.external_id,
        title=document.title,
        text=document.body,
        source=document.source,
        metadata=document.meta,
        acl_groups=document.acl_groups,
    )


@dataclass
class QuarantineWriter:
    """Upserts rows into collections and quarantines the documents that cannot be indexed.

    Example:
        >>> writer = QuarantineWriter(backend)
        >>> writer.write("kb__v3", rows, point_builder)
        >>> writer.quarantined  # {document id: (external id, reason)}
    """

    backend: IndexBackend
    quarantined: dict[int, tuple[str, str]] = field(default_factory=dict)
    refused_passage_ids: list[int] = field(default_factory=list)
    """Passages of documents quarantined after some collection may already hold them: delete them everywhere."""

    def quarantine(self, document: Document, passages: Sequence[Passage], reason: str) -> None:
        reason = reason[:_REASON_CHARS]
        if document.quarantine_reason is None:
            logger.warning("quarantined document %r of corpus %s: %s", document.external_id, document.corpus_id, reason)
        document.quarantine_reason = reason
        self.quarantined[document.id] = (document.external_id, reason)
        self.refused_passage_ids.extend(passage.id for passage in passages)

    def write(self, collection: str, rows: Sequence[tuple[Passage, Document]], points: PointBuilder) -> int:
        """Upsert the rows' points; returns how many passages were written."""
        accepted: list[tuple[Passage, Document]] = []
        for passage, document in rows:
            reason = document.quarantine_reason or stored_document_problem(document)
            if reason is not None:
                self.quarantine(document, [passage], reason)
            else:
                accepted.append((passage, document))
        if not accepted:
            return 0
        try:
            self.backend.upsert(collection, points.build(accepted))
            return len(accepted)
        except (UnreadableCollectionError, FerretError):
            raise
        except Exception as batch_error:
            return self._write_one_by_one(collection, accepted, points, batch_error)

    def _takes_writes(self, collection: str, row: tuple[Passage, Document], points: PointBuilder) -> bool:
        """A lone refused document is its own fault only if the index takes a probe point with its vectors and an
        empty payload (then removed): an index that refuses every write is at fault itself."""
        (point,) = points.build([row])
        probe = replace(point, id=str(uuid.uuid5(uuid.NAMESPACE_URL, "ferret:quarantine-probe")), payload={})
        try:
            self.backend.upsert(collection, [probe])
        except Exception:
            with suppress(Exception):  # a failing index may still have written it
                self.backend.delete(collection, [probe.id])
            return False
        self.backend.delete(collection, [probe.id])
        return True

    def _write_one_by_one(
        self,
        collection: str,
        rows: Sequence[tuple[Passage, Document]],
        points: PointBuilder,
        batch_error: Exception,
    ) -> int:
        by_document: dict[int, list[tuple[Passage, Document]]] = {}
        for passage, document in rows:
            by_document.setdefault(document.id, []).append((passage, document))
        written = 0
        refused: list[tuple[Document, list[Passage], str]] = []
        for group in by_document.values():
            try:
                self.backend.upsert(collection, points.build(group))
                written += len(group)
            except Exception as error:
                refused.append((group[0][1], [passage for passage, _ in group], f"refused by the index: {error}"))
        if written == 0 and not (len(refused) == 1 and self._takes_writes(collection, rows[0], points)):
            raise batch_error  # nothing goes in, whatever the document: the index is at fault, not the data
        for document, passages, reason in refused:
            self.quarantine(document, passages, reason)
            self.backend.delete(collection, [point_id(document.corpus_id, passage.id) for passage in passages])
        return written
