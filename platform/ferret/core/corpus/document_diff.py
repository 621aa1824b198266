"""The one path from a corpus's document changes to its database rows and every live index version.

Every way documents arrive computes a ``DocumentDiff`` its own way: a full or polled ingest (``Ingestor``), the push
API (``PushIngestor``), and a source sync at each checkpoint (``SourceSync``). ``DiffApplier.apply`` then does the
same thing for all of them, and all of them count into one ``DocumentReport``:

1. flush the rows (new documents and passages get their ids; deleted ones are gone in this transaction);
2. embed the new passages into every live index version (ready or active), each with its own model, and drop the
   points of stale passages (``VersionedCollection.sync``); point ids are uuid5 of the passage, so a repeat is free;
3. rewrite the ``acl_groups`` of permission-only changes in the rows and in the points' payload, nothing re-embedded
   (``ferret.core.corpus.permissions``).

The caller commits afterwards. If the index update fails, the session is rolled back and every live index is put
back as the database now is (``_undo``), so a failure leaves nothing half-written and the same diff can be applied
again.

Example:
    >>> applier = DiffApplier(session, VersionedCollection(session, settings, backend, corpus))
    >>> applier.apply(DocumentDiff(new_passages=passages, stale_passage_ids=[7, 8]), report)
    >>> session.commit()
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.permissions import apply_permission_changes
from ferret.core.db.models import Passage
from ferret.core.errors import UnavailableError
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.sources.documents import SkippedItem

logger = logging.getLogger(__name__)


@dataclass
class DocumentReport:
    """What one ingest, push or sync did to a corpus's documents.

    One report for every path; each face keeps the JSON keys it always had: ``as_dict`` for ingest jobs and the push
    API (``added``, ``updated``, ...), ``counts`` for sync runs (``new``, ``changed``, ``permission_updates``,
    ``passages_embedded``, ...). The sync names are also read-only aliases of the fields.
    """

    added: int = 0
    updated: int = 0
    """Documents whose content changed: re-chunked and re-embedded."""
    unchanged: int = 0
    deleted: int = 0
    permissions_updated: int = 0
    """Documents whose content was unchanged but whose ACL groups changed: payload updated, nothing re-embedded."""
    passages_added: int = 0
    passages_deleted: int = 0
    stale: int = 0
    """Pushed documents ignored because their ``updated_at`` is older than the stored one."""
    skipped: list[SkippedItem] = field(default_factory=list)
    checkpoints: int = 0
    """Sync only: commits before the final one (each with the source's cursor)."""
    memberships_changed: int = 0
    """Sync only: group memberships the source reported that changed."""
    pruned: bool = False
    """Sync only: whether deletions were decided from the source's complete id listing."""
    resumed: bool = False
    """Sync only: whether this sync continued from the checkpoint of a failed one."""
    started: float = field(default_factory=time.monotonic)

    @property
    def seen(self) -> int:
        """Documents the source delivered and that were stored, compared or updated."""
        return self.added + self.updated + self.unchanged + self.permissions_updated

    # The sync run's names for the same counts (``SyncReport`` before the two reports were one).
    @property
    def new(self) -> int:
        return self.added

    @property
    def changed(self) -> int:
        return self.updated

    @property
    def permission_updates(self) -> int:
        return self.permissions_updated

    @property
    def passages_embedded(self) -> int:
        return self.passages_added

    @property
    def documents_seen(self) -> int:
        return self.seen

    def as_dict(self) -> dict[str, Any]:
        """The ingest job's result and the push API's response body."""
        return {
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "passages_added": self.passages_added,
            "passages_deleted": self.passages_deleted,
            "permissions_updated": self.permissions_updated,
            "stale": self.stale,
            "skipped": [item.model_dump() for item in self.skipped],
        }

    def counts(self) -> dict[str, Any]:
        """A sync run's counts (``sync_runs.counts``), shown by ``ferret source`` and ``GET /v1/sources``."""
        return {
            "new": self.added,
            "changed": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "permission_updates": self.permissions_updated,
            "skipped": len(self.skipped),
            "passages_embedded": self.passages_added,
            "checkpoints": self.checkpoints,
            "memberships_changed": self.memberships_changed,
            "pruned": self.pruned,
            "resumed": self.resumed,
            "duration_s": round(time.monotonic() - self.started, 3),
        }


@dataclass
class DocumentDiff:
    """Changes made in the session and not yet applied to the indexes: passages to embed, passages whose points
    go, and documents whose principals are rewritten (document id -> principals)."""

    new_passages: list[Passage] = field(default_factory=list)
    stale_passage_ids: list[int] = field(default_factory=list)
    permission_changes: dict[int, list[str]] = field(default_factory=dict)


class DiffApplier:
    """Applies ``DocumentDiff``s of one corpus to every live index version (see the module docstring)."""

    def __init__(self, session: Session, versions: VersionedCollection) -> None:
        self.session = session
        self.versions = versions
        self._reported: set[int] = set()
        """Quarantined documents already in a report: one entry each, however many checkpoints follow."""

    def apply(self, diff: DocumentDiff, report: DocumentReport) -> None:
        """Flush, update every live index version, rewrite permissions; counts go into ``report``. Not committed."""
        self.session.flush()
        added_ids = [passage.id for passage in diff.new_passages]
        if added_ids or diff.stale_passage_ids:
            try:
                self.versions.sync(added_ids, diff.stale_passage_ids)
            except BaseException:
                self.session.rollback()
                self._undo(added_ids, diff.stale_passage_ids)
                raise
        apply_permission_changes(self.session, self.versions.backend, self.versions.corpus, diff.permission_changes)
        report.passages_added += len(added_ids)
        report.passages_deleted += len(diff.stale_passage_ids)
        for document_id, (external_id, reason) in self.versions.writer.quarantined.items():
            if document_id not in self._reported:
                self._reported.add(document_id)
                report.skipped.append(SkippedItem(external_id=external_id, reason=f"quarantined: {reason}"))

    def _undo(self, added_ids: list[int], removed_ids: list[int]) -> None:
        """After a failed update and the database rollback, put every live index back as the database now is:
        remove the points of passages that no longer exist, restore those of passages that are back."""
        try:
            self.versions.sync(removed_ids, added_ids)
            self.session.commit()
        except UnavailableError:
            # A shard held by another process (versions are synced in the same order both times): the update wrote
            # nothing there, and the versions before it have just been put back.
            self.session.rollback()
        except Exception:
            logger.exception("could not undo a failed index update; run the same ingest or sync again to repair it")
            self.session.rollback()
