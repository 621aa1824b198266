"""The sync engine of incremental connectors: checkpoints, permissions apart from content, safe pruning, reports.

``SourceSync.run_sync`` drives an ``IncrementalConnector`` (``ferret.core.sources.incremental``) from the cursor stored
on the source row and keeps four promises:

1. **Resumable.** Every ``checkpoint_every`` documents, at the next ``CursorMark``, the documents seen so far are
   embedded into every live index version, the mark's cursor is written to ``sources.checkpoint`` and everything
   commits together. A sync killed in between loses only the uncommitted tail, which the resumed sync gets again
   from the persisted cursor; re-delivered documents are recognised by their content hash.
2. **Permissions apart from content.** A document whose content hash is unchanged but whose principals differ is
   a permission update: the row's ``acl_groups`` and the ``acl_groups`` payload of its points in every live version
   are rewritten, nothing is re-embedded (``ferret.core.corpus.permissions``). ``PermissionPass`` connectors also
   get a separate pass for edits that do not move the cursor.
3. **Safe pruning.** Deletions come from explicit ``Deleted`` markers and from the complete id listing
   (``SlimConnector.list_external_ids``). A listing that raises deletes nothing and fails the sync with a
   one-sentence error; an empty listing while documents are indexed is treated as a failure too unless the
   connector declares ``empty_listing_is_valid``.
4. **Observed.** Each sync is a ``sync_runs`` row whose counts (new, changed, unchanged, deleted, permission
   updates, skipped with reasons, checkpoints, duration) are committed with every checkpoint and shown by
   ``ferret source list/sync`` and ``GET /v1/sources``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.corpus.document_diff import DocumentDiff, DocumentReport
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.document import delete_documents, passage_ids_of_documents
from ferret.core.db.models import Corpus, Source, SyncRun, SyncState, utcnow
from ferret.core.db.models import Document as DocumentRow
from ferret.core.db.source import document_fingerprints, replace_group_members, start_sync_run
from ferret.core.errors import FerretError, InvalidInputError
from ferret.core.index.backend import IndexBackend
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document as SourceDocument
from ferret.core.sources.documents import SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    Deleted,
    GroupSource,
    IncompleteListingError,
    IncrementalConnector,
    PermissionPass,
)
from ferret.core.sources.principals import normalize

logger = logging.getLogger(__name__)

MAX_REPORTED_SKIPS = 500
"""Skipped items kept on a run row with their reasons; the count covers all of them."""


class SyncFailedError(FerretError):
    """A sync stopped: what was committed at checkpoints stays, nothing was deleted after the failure."""


SyncReport = DocumentReport
"""The sync's name for the one report of ingests, pushes and syncs; its run row stores ``counts()``."""


@dataclass
class _Pending:
    """Work since the last commit: the diff to apply (passages to embed, points to drop, principals to rewrite) and
    the rows stored since, by external id."""

    diff: DocumentDiff = field(default_factory=DocumentDiff)
    rows: dict[str, DocumentRow] = field(default_factory=dict)
    documents: int = 0


class SourceSync(Ingestor):
    """Sync one configured source of a corpus (see the module docstring).

    Example:
        >>> run = SourceSync(session, settings, backend, corpus, source).run_sync(build_connector("sql", **config))
        >>> run.counts["new"], run.state
        (1200, <SyncState.SUCCEEDED: 'succeeded'>)
    """

    def __init__(
        self,
        session: Session,
        settings: FerretSettings,
        backend: IndexBackend,
        corpus: Corpus,
        source: Source,
        *,
        checkpoint_every: int = 100,
        on_checkpoint: Callable[[SyncReport], None] | None = None,
    ) -> None:
        super().__init__(session, settings, backend, corpus)
        self.backend = backend
        self.source = source
        self.checkpoint_every = max(1, checkpoint_every)
        self.on_checkpoint = on_checkpoint

    def run_sync(self, connector: IncrementalConnector, *, trigger: str = "manual", full: bool = False) -> SyncRun:
        """One sync; returns its finished run row, or raises ``SyncFailedError`` after recording the failure.

        ``full`` reads every document from the start instead of resuming from the checkpoint: after an upgrade that
        changes how files are read, documents the checkpoint would skip are read again (those whose text and title
        come out the same stay unchanged and are not re-embedded)."""
        try:
            run = start_sync_run(self.session, self.source, trigger)  # refused while another sync of it is going
        except BaseException:
            connector.close()
            raise
        self.session.commit()
        report = SyncReport()
        cursor = None if full else (self.source.checkpoint or {}).get("cursor")
        report.resumed = cursor is not None and _previous_failed(self.session, self.source, run)
        self.known = document_fingerprints(self.session, self.corpus, self.source.name)
        try:
            self._consume(connector, cursor, run, report)
            self._prune(connector, report)
            self._permission_pass(connector, report)
            self._memberships(connector, report)
            self._commit(run, report, self._last_cursor, final=True)
        except BaseException as error:
            self.session.rollback()
            self._fail(run, report, error)
            if isinstance(error, Exception):
                raise SyncFailedError(_one_sentence(self.source.name, error)) from error
            raise
        finally:
            connector.close()
        return run

    # -- phases -------------------------------------------------------------------------------------------------
    def _consume(self, connector: IncrementalConnector, cursor: Any, run: SyncRun, report: SyncReport) -> None:
        self._pending = _Pending()
        self._last_cursor = cursor
        for item in connector.sync(cursor):
            if isinstance(item, CursorMark):
                self._last_cursor = item.cursor
                if self._pending.documents >= self.checkpoint_every:
                    self._commit(run, report, item.cursor)
            elif isinstance(item, Deleted):
                self._delete(item.external_id, report)
            elif isinstance(item, SkippedItem):
                report.skipped.append(item)
            elif not item.text.strip():
                report.skipped.append(SkippedItem(external_id=item.external_id, reason="empty document"))
            else:
                self._upsert(item, report)
                self._pending.documents += 1

    def _upsert(self, item: SourceDocument, report: SyncReport) -> None:
        try:
            principals = normalize(item.acl_groups)
        except InvalidInputError as error:  # one bad item never stops a sync
            report.skipped.append(SkippedItem(external_id=item.external_id, reason=str(error)))
            return
        existing = self.known.get(item.external_id)
        if existing is not None:
            document_id, digest, stored = existing
            if document_id < 0:  # stored earlier in this sync, not flushed yet
                self.session.flush()
                document_id = self._pending.rows[item.external_id].id
            if digest == item.content_hash:
                if stored != principals:
                    self._pending.diff.permission_changes[document_id] = principals
                    self.known[item.external_id] = (document_id, digest, principals)
                    report.permissions_updated += 1
                else:
                    report.unchanged += 1
                return
            self._pending.diff.stale_passage_ids.extend(passage_ids_of_documents(self.session, [document_id]))
            self._pending.diff.permission_changes.pop(document_id, None)
            self._drop_row(item.external_id, document_id)
            report.updated += 1
        else:
            report.added += 1
        passages = self._store(item.model_copy(update={"acl_groups": principals}), self.source.name)
        self._pending.diff.new_passages.extend(passages)
        row = passages[0].document if passages else self._row(item.external_id)
        self._pending.rows[item.external_id] = row
        if item.updated_at is not None:
            row.source_updated_at = item.updated_at
        self.known[item.external_id] = (-1, item.content_hash, principals)

    def _row(self, external_id: str) -> DocumentRow:
        self.session.flush()
        return self.session.execute(
            select(DocumentRow).where(
                DocumentRow.corpus_id == self.corpus.id,
                DocumentRow.source == self.source.name,
                DocumentRow.external_id == external_id,
            )
        ).scalar_one()

    def _drop_row(self, external_id: str, document_id: int) -> None:
        pending = self._pending.rows.pop(external_id, None)
        if pending is not None:
            self._pending.diff.new_passages = [p for p in self._pending.diff.new_passages if p.document is not pending]
        delete_documents(self.session, [document_id])
        if pending is not None:
            self.session.expunge(pending)

    def _delete(self, external_id: str, report: SyncReport) -> None:
        existing = self.known.pop(external_id, None)
        if existing is None:
            return
        document_id = existing[0]
        if document_id < 0:
            self.session.flush()
            document_id = self._pending.rows[external_id].id
        self._pending.diff.stale_passage_ids.extend(passage_ids_of_documents(self.session, [document_id]))
        self._pending.diff.permission_changes.pop(document_id, None)
        self._drop_row(external_id, document_id)
        report.deleted += 1

    def _prune(self, connector: IncrementalConnector, report: SyncReport) -> None:
        if not isinstance(connector, SlimConnector):
            return
        try:
            listed = set(connector.list_external_ids())
        except Exception as error:
            raise IncompleteListingError(f"listing the source's documents failed ({_reason(error)})") from error
        if not listed and self.known and not connector.empty_listing_is_valid:
            raise IncompleteListingError(
                f"the source listed no documents while {len(self.known):,} are indexed, which looks like an "
                "outage or a permission problem"
            )
        for external_id in sorted(set(self.known) - listed):
            self._delete(external_id, report)
        report.pruned = True

    def _permission_pass(self, connector: IncrementalConnector, report: SyncReport) -> None:
        if not isinstance(connector, PermissionPass):
            return
        for external_id, principals in connector.iter_permissions():
            existing = self.known.get(external_id)
            wanted = normalize(principals)
            if existing is None or existing[2] == wanted:
                continue
            document_id = existing[0]
            if document_id < 0:
                self.session.flush()
                document_id = self._pending.rows[external_id].id
                self._pending.rows[external_id].acl_groups = wanted
            self._pending.diff.permission_changes[document_id] = wanted
            self.known[external_id] = (document_id, existing[1], wanted)
            report.permissions_updated += 1

    def _memberships(self, connector: IncrementalConnector, report: SyncReport) -> None:
        if isinstance(connector, GroupSource):
            pairs = [(m.group, m.member) for m in connector.group_memberships()]
            report.memberships_changed = replace_group_members(self.session, self.source, pairs)

    # -- commits ------------------------------------------------------------------------------------------------
    def _commit(self, run: SyncRun, report: SyncReport, cursor: Any, *, final: bool = False) -> None:
        """Embed and apply the pending work to every live version, persist the cursor and the counts, commit."""
        pending = self._pending
        self.applier.apply(pending.diff, report)
        report.checkpoints += 0 if final else 1
        self.source.checkpoint = {"cursor": cursor}
        self.source.last_run_at = utcnow()
        run.counts = report.counts()
        run.skipped = [item.model_dump() for item in report.skipped[:MAX_REPORTED_SKIPS]]
        if final:
            run.state = SyncState.SUCCEEDED
            run.finished_at = utcnow()
        self.session.commit()
        for external_id, row in pending.rows.items():
            fingerprint = self.known.get(external_id)
            if fingerprint is not None and fingerprint[0] < 0:
                self.known[external_id] = (row.id, fingerprint[1], fingerprint[2])
        self._pending = _Pending()
        if self.on_checkpoint is not None and not final:
            self.on_checkpoint(report)

    def _fail(self, run: SyncRun, report: SyncReport, error: BaseException) -> None:
        """Record the failure on the run row (its own commit, after the rollback of the uncommitted tail)."""
        try:
            failed = self.session.get(SyncRun, run.id)
            if failed is None:
                return
            # The counts and skips stay those of the last checkpoint: the uncommitted tail was rolled back.
            failed.state = SyncState.FAILED
            failed.error = _one_sentence(self.source.name, error)
            failed.finished_at = utcnow()
            self.session.commit()
        except Exception:
            logger.exception("could not record the failure of sync run %s", run.id)
            self.session.rollback()


def _previous_failed(session: Session, source: Source, current: SyncRun) -> bool:
    previous = session.scalar(
        select(SyncRun).where(SyncRun.source_id == source.id, SyncRun.id < current.id).order_by(SyncRun.id.desc())
    )
    return previous is not None and previous.state == SyncState.FAILED


def _reason(error: BaseException) -> str:
    """The error's text on one line (a driver's message may span several; the fix is often on the last)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 400 else text[:399] + "…"


def _one_sentence(source: str, error: BaseException) -> str:
    if isinstance(error, IncompleteListingError):
        return f"Sync of source {source!r} stopped: {_reason(error)}; nothing was deleted."
    if isinstance(error, KeyboardInterrupt):
        return f"Sync of source {source!r} was interrupted; the next sync resumes from its last checkpoint."
    # A FerretError is already a sentence for the user (the connector names the setting to fix); a class name is
    # only news for other errors.
    if isinstance(error, FerretError):
        cause = f": {_reason(error).rstrip('.')}"
    else:
        cause = f" ({type(error).__name__}: {_reason(error)})"
    return (
        f"Sync of source {source!r} failed{cause}; what was checkpointed is kept, nothing was deleted, and the next "
        "sync resumes from the last checkpoint."
    )


def iter_documents(connector: IncrementalConnector) -> Iterator[SourceDocument]:
    """The documents of a full sync, without storing anything (benchmarks: the connector's own throughput)."""
    for item in connector.sync(None):
        if isinstance(item, SourceDocument):
            yield item
