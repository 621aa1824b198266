"""The push API's ingestion: a batch of documents upserted and a list of external ids deleted, idempotently.

A pushing connector owns its documents' lifecycle, so nothing is deleted unless named, and the same batch sent
twice changes nothing the second time: a document whose stored ``version`` equals the pushed one, or whose content
hash is unchanged, is skipped. Everything else takes the same path as a pull ingest (``Ingestor``): chunked,
stored, embedded into every live index version before the transaction commits, undone if that fails.

Example:
    >>> pushed = [PushedDocument(Document(external_id="kb/1", text="..."), version="7")]
    >>> report = PushIngestor(session, settings, backend, corpus).push("crm", pushed, delete_external_ids=["kb/0"])
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError

from ferret.core.corpus.chunking import passage_text
from ferret.core.corpus.document_diff import DocumentDiff
from ferret.core.corpus.ingest import Ingestor, IngestReport
from ferret.core.db.corpus import get_or_create_source
from ferret.core.db.document import delete_documents, document_states, passage_ids_of_documents
from ferret.core.db.models import Document, Passage, utcnow
from ferret.core.db.source import document_permissions
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.sources.documents import Document as SourceDocument
from ferret.core.sources.documents import SkippedItem

PUSH_SOURCE_KIND = "push"

_locks_guard = threading.Lock()
_corpus_locks: dict[int, threading.Lock] = {}


@contextmanager
def _corpus_lock(corpus_id: int) -> Iterator[None]:
    """One push at a time per corpus in this process: two batches naming the same new document cannot both insert
    it, and index updates of one corpus never interleave. Other processes are caught by the unique constraint."""
    with _locks_guard:
        lock = _corpus_locks.setdefault(corpus_id, threading.Lock())
    with lock:
        yield


@dataclass(frozen=True)
class PushedDocument:
    document: SourceDocument
    version: str | None = None
    """The source's version of the document; the same version pushed again is skipped without comparing content."""


class PushIngestor(Ingestor):
    """The pull ``Ingestor``'s storage and index path, driven by explicit upserts and deletions."""

    def push(
        self, source_name: str, documents: Sequence[PushedDocument], delete_external_ids: Sequence[str] = ()
    ) -> IngestReport:
        both = {pushed.document.external_id for pushed in documents} & set(delete_external_ids)
        if both:
            raise InvalidInputError(
                f"Document {sorted(both)[0]!r} is both upserted and deleted in one request; send one or the other."
            )
        with _corpus_lock(self.corpus.id):
            try:
                return self._push(source_name, documents, delete_external_ids)
            except IntegrityError:
                self.session.rollback()
                raise ConflictError(
                    "Another push changed the same documents at the same time; send the batch again."
                ) from None

    def texts_to_embed(self, source_name: str, documents: Sequence[PushedDocument]) -> list[str]:
        """The passage texts a push of ``documents`` would embed: those of new documents and of changed ones (the
        skips of ``push``: same version or same content). For ``VersionedCollection.prefetch_embeddings``; a text
        listed in vain costs an encoding, one left out is encoded by the sync that stores it."""
        known = document_states(
            self.session, self.corpus, source_name, [pushed.document.external_id for pushed in documents]
        )
        texts: list[str] = []
        for pushed in documents:
            item = pushed.document
            state = known.get(item.external_id)
            if not item.text.strip() or (
                state is not None
                and ((pushed.version is not None and state[2] == pushed.version) or state[1] == item.content_hash)
            ):
                continue
            title = self.chunker.fit_title(item.title)
            texts.extend(passage_text(title, chunk.text) for chunk in self.chunker.chunk(title, item.text))
        return texts

    def _push(
        self, source_name: str, documents: Sequence[PushedDocument], delete_external_ids: Sequence[str]
    ) -> IngestReport:
        source = get_or_create_source(self.session, self.corpus, source_name, PUSH_SOURCE_KIND, {})
        report = IngestReport()
        known = document_states(
            self.session,
            self.corpus,
            source.name,
            [pushed.document.external_id for pushed in documents] + list(delete_external_ids),
        )
        permissions = document_permissions(
            self.session, self.corpus, source.name, [pushed.document.external_id for pushed in documents]
        )
        permission_changes: dict[int, list[str]] = {}
        seen: set[str] = set()
        new_passages: list[Passage] = []
        stale_passage_ids: list[int] = []
        for pushed in documents:
            item = pushed.document
            if item.external_id in seen:
                report.skipped.append(SkippedItem(external_id=item.external_id, reason="duplicate id; first one kept"))
                continue
            seen.add(item.external_id)
            if not item.text.strip():
                report.skipped.append(SkippedItem(external_id=item.external_id, reason="empty document"))
                continue
            existing = known.get(item.external_id)
            if existing is not None:
                document_id, content_hash, version = existing
                stored_groups, stored_at = permissions.get(item.external_id, ([], None))
                if _older(item.updated_at, stored_at):
                    report.stale += 1  # an out-of-order retry must not overwrite a newer version
                    continue
                if (pushed.version is not None and version == pushed.version) or content_hash == item.content_hash:
                    row = self.session.get(Document, document_id)
                    if row is not None:
                        if pushed.version is not None and version != pushed.version:
                            row.version = pushed.version  # same content under a new version: remember it
                        if item.updated_at is not None:
                            row.source_updated_at = item.updated_at
                    groups = sorted(set(item.acl_groups))
                    if groups != stored_groups:  # permissions are compared on their own, revocations included
                        permission_changes[document_id] = groups
                        report.permissions_updated += 1
                    else:
                        report.unchanged += 1
                    continue
                stale_passage_ids.extend(passage_ids_of_documents(self.session, [document_id]))
                delete_documents(self.session, [document_id])
                report.updated += 1
            else:
                report.added += 1
            stored = self._store(item, source.name, version=pushed.version)
            if stored and item.updated_at is not None:
                stored[0].document.source_updated_at = item.updated_at
            new_passages.extend(stored)

        gone = [known[external_id][0] for external_id in sorted(set(delete_external_ids)) if external_id in known]
        stale_passage_ids.extend(passage_ids_of_documents(self.session, gone))
        delete_documents(self.session, gone)
        report.deleted = len(gone)

        self.applier.apply(DocumentDiff(new_passages, stale_passage_ids, permission_changes), report)
        source.last_run_at = utcnow()
        self.session.commit()
        self._after_commit()
        return report


def _older(pushed: datetime | None, stored: datetime | None) -> bool:
    """Whether a pushed ``updated_at`` is strictly older than the stored one (naive datetimes are UTC)."""
    if pushed is None or stored is None:
        return False
    return _utc(pushed) < _utc(stored)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
