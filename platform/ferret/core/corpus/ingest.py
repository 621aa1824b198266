"""Incremental ingestion: documents from a connector into the database and into every live index version.

Unchanged documents (same content hash) are skipped; changed ones are re-chunked and re-embedded; documents the
source no longer has are deleted from the database and from every live index version. The diff is applied by the
one ``DiffApplier`` that pushes and source syncs use too (``document_diff``); database changes commit only after
the index is updated, and point ids are deterministic, so a failed ingest can simply be run again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import PassageChunker
from ferret.core.corpus.document_diff import DiffApplier, DocumentDiff, DocumentReport
from ferret.core.db.corpus import get_or_create_source
from ferret.core.db.document import delete_documents, document_hashes, passage_ids_of_documents
from ferret.core.db.models import Corpus, Document, Passage, Source, utcnow
from ferret.core.db.source import document_fingerprints, find_source
from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import BaseConnector, LoadConnector, PollConnector, SlimConnector
from ferret.core.sources.documents import ConnectorCheckpoint, SkippedItem
from ferret.core.sources.documents import Document as SourceDocument
from ferret.core.sources.incremental import IncompleteListingError

_FLUSH_EVERY = 200
logger = logging.getLogger(__name__)


IngestReport = DocumentReport
"""The ingest's name for the one report of ingests, pushes and syncs (``document_diff.DocumentReport``)."""


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _location(config: dict[str, Any] | None) -> str | None:
    """Where a source reads from (a folder's root, a BEIR folder's path), absolute: a root stored relative by an
    older Ferret is the same folder as its absolute spelling."""
    config = config or {}
    value = config.get("root", config.get("path"))
    return str(Path(str(value)).expanduser().resolve()) if value is not None else None


def chunker_for(corpus: Corpus, settings: FerretSettings) -> PassageChunker:
    """Chunks are cut with the base encoder's tokenizer; trained versions of it share the vocabulary."""
    return PassageChunker(
        _tokenizer(str(base_model_path(settings))),
        max_tokens=corpus.max_passage_tokens,
        overlap=corpus.passage_overlap_tokens,
    )


class Ingestor:
    def __init__(
        self,
        session: Session,
        settings: FerretSettings,
        backend: IndexBackend,
        corpus: Corpus,
        *,
        progress: Callable[[IngestReport], None] | None = None,
    ) -> None:
        self.session = session
        self.settings = settings
        self.corpus = corpus
        self.versions = VersionedCollection(session, settings, backend, corpus)
        self.applier = DiffApplier(session, self.versions)
        self.chunker = chunker_for(corpus, settings)
        self.progress = progress

    def run(self, connector: BaseConnector, *, incremental: bool = False) -> IngestReport:
        """Full load (default) or, with ``incremental`` and a poll-capable connector, changes since the checkpoint.

        Deletions are refused, with nothing changed, when the listing is empty while the source has documents (an
        unmounted share, a wrong folder) or when the source now reads another folder than before and would lose
        documents (a second folder needs its own ``--source``); a folder moved with its files deletes nothing and
        goes through."""
        stored = find_source(self.session, self.corpus, connector.source_name)
        previous_location = _location(stored.config) if stored is not None else None
        source = get_or_create_source(
            self.session, self.corpus, connector.source_name, connector.kind, connector.config_json()
        )
        started = datetime.now(UTC)
        present = self._listing(connector)
        if incremental and isinstance(connector, PollConnector):
            checkpoint = ConnectorCheckpoint.model_validate(source.checkpoint or {})
            items = connector.poll_source(checkpoint.last_polled_at, started)
        elif isinstance(connector, LoadConnector):
            items = connector.load_from_source()
        else:
            raise InvalidInputError(f"The {connector.kind} connector cannot load a source in full; use --incremental.")

        report = IngestReport()
        known = document_hashes(self.session, self.corpus, source.name)
        acls = {
            external_id: acl
            for external_id, (_, _, acl) in document_fingerprints(self.session, self.corpus, source.name).items()
        }
        permission_changes: dict[int, list[str]] = {}
        seen: set[str] = set()
        new_passages: list[Passage] = []
        stale_passage_ids: list[int] = []
        for item in self._items(items, report):
            if item.external_id in seen:
                report.skipped.append(SkippedItem(external_id=item.external_id, reason="duplicate id; first one kept"))
                continue
            seen.add(item.external_id)
            existing = known.get(item.external_id)
            if existing is not None and existing[1] == item.content_hash:
                groups = sorted(set(item.acl_groups))
                if existing[0] > 0 and acls.get(item.external_id) != groups:
                    permission_changes[existing[0]] = groups  # permissions compared on their own: no re-embedding
                    report.permissions_updated += 1
                else:
                    report.unchanged += 1
                continue
            if existing is not None:
                stale_passage_ids.extend(passage_ids_of_documents(self.session, [existing[0]]))
                delete_documents(self.session, [existing[0]])
                report.updated += 1
            else:
                report.added += 1
            new_passages.extend(self._store(item, source.name))
            known[item.external_id] = (-1, item.content_hash)
            if report.seen % _FLUSH_EVERY == 0:
                self.session.flush()
                if self.progress:
                    self.progress(report)

        # Deletions: the ids the source lists now (a file it holds but cannot read keeps its last good version);
        # without a listing, a full load's items are everything.
        remaining = present if present is not None else (seen if not incremental else None)
        if remaining is not None:
            gone = [doc_id for external_id, (doc_id, _) in known.items() if external_id not in remaining and doc_id > 0]
            if gone:
                self._refuse_unsafe_deletion(source, connector, previous_location, len(remaining), len(gone))
            stale_passage_ids.extend(passage_ids_of_documents(self.session, gone))
            delete_documents(self.session, gone)
            report.deleted = len(gone)

        self.applier.apply(DocumentDiff(new_passages, stale_passage_ids, permission_changes), report)
        source.checkpoint = ConnectorCheckpoint(last_polled_at=started).model_dump(mode="json")
        source.last_run_at = utcnow()
        self.session.commit()
        self._after_commit()
        if self.progress:
            self.progress(report)
        return report

    def _listing(self, connector: BaseConnector) -> set[str] | None:
        """Every id the source holds now, or None when it cannot list; a listing that fails part way (a folder
        that cannot be read, a mount that dropped) stops the run before anything is changed."""
        if not isinstance(connector, SlimConnector):
            return None
        try:
            return set(connector.list_external_ids())
        except IncompleteListingError as error:
            raise InvalidInputError(
                f"Nothing was changed: {error} while listing {_location(connector.config_json()) or 'the source'}, "
                "so no document could safely be deleted; check it is mounted and readable, then run it again."
            ) from None

    def _refuse_unsafe_deletion(
        self, source: Source, connector: BaseConnector, previous_location: str | None, listed: int, gone: int
    ) -> None:
        """Raise, rolling back what this run staged, when its deletions look like a mistake rather than removals."""
        location = _location(connector.config_json())
        if listed == 0:
            problem = (
                f"{location or 'the source'} lists no readable document while source {source.name!r} of corpus "
                f"{self.corpus.name!r} holds {gone:,}"
            )
            remedy = (
                f"check it is mounted and readable, or empty the corpus with "
                f"`ferret source remove {self.corpus.name} {source.name} --yes`"
            )
        elif previous_location is not None and location != previous_location:
            problem = (
                f"source {source.name!r} of corpus {self.corpus.name!r} reads {previous_location}, and reading "
                f"{location} instead would delete {gone:,} of its documents"
            )
            remedy = (
                f"give the new folder its own source (`--source NAME`), or replace the old one after "
                f"`ferret source remove {self.corpus.name} {source.name} --yes`"
            )
        else:
            return
        self.session.rollback()
        raise InvalidInputError(f"Nothing was changed: {problem}; {remedy}.")

    def _after_commit(self) -> None:
        """Versions the sync could not load are replaced once the ingest is safely committed."""
        self.versions.replace_all_unreadable()

    def _items(self, items: Iterator[SourceDocument | SkippedItem], report: IngestReport) -> Iterator[SourceDocument]:
        for item in items:
            if isinstance(item, SkippedItem):
                report.skipped.append(item)
            elif not item.text.strip():
                report.skipped.append(SkippedItem(external_id=item.external_id, reason="empty document"))
            else:
                yield item

    def _store(self, item: SourceDocument, source: str, *, version: str | None = None) -> list[Passage]:
        title = self.chunker.fit_title(item.title)
        document = Document(
            corpus_id=self.corpus.id,
            source=source,
            external_id=item.external_id,
            title=title,
            body=item.text,
            meta=item.metadata,
            acl_groups=sorted(set(item.acl_groups)),
            content_hash=item.content_hash,
            version=version,
        )
        self.session.add(document)
        passages = [
            Passage(corpus_id=self.corpus.id, ordinal=i, text=chunk.text, token_count=chunk.token_count)
            for i, chunk in enumerate(self.chunker.chunk(title, item.text))
        ]
        document.passages = passages
        return passages
