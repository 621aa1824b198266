"""Index versions of one corpus: built completely, promoted by one atomic alias swap, rolled back, collected.

Life of a version (``IndexState``): ``building`` → ``ready`` → ``active`` → ``ready`` (superseded, kept for
rollback) → ``retired`` (collection deleted). A build that fails or is interrupted is marked ``failed`` and its
partial collection removed; the alias never points at an incomplete collection.

A version whose collection can no longer be loaded (``UnreadableCollectionError``) is marked ``failed`` with the
engine's reason; if it was active, the newest ready version that loads takes over, so the corpus keeps serving, and
``repair`` rebuilds it from the database. Documents the index cannot take are quarantined (``quarantine.py``).

Example:
    >>> versions = VersionedCollection(session, settings, backend, corpus)
    >>> v = versions.build(registry.ensure_base())
    >>> versions.promote(v)
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sqlalchemy.orm import Session

from ferret.core.db.activation import INDEX, PROMOTE, ROLLBACK, record_activation, rollback_target
from ferret.core.db.audit import SYSTEM_ACTOR, record_event
from ferret.core.db.document import (
    indexable_documents,
    indexable_passage_count,
    iter_passages,
    passage_ids_by_length,
    passage_ids_of_documents,
)
from ferret.core.db.index_version import (
    active_index_version,
    create_index_version,
    list_index_versions,
    live_index_versions,
    plain_index_versions,
)
from ferret.core.db.models import Corpus, IndexState, IndexVersion, ModelVersion, utcnow
from ferret.core.encoder.query_encoder import prepare_query_encoder
from ferret.core.encoder.registry import load_encoder
from ferret.core.errors import ConflictError, InvalidInputError, UnavailableError
from ferret.core.index.backend import IndexBackend, UnreadableCollectionError
from ferret.core.index.points import Expansion, PointBuilder, sparse_encoder_for
from ferret.core.index.quarantine import QuarantineWriter, stored_document_problem
from ferret.core.index.types import point_id
from ferret.core.progress import Progress, quiet
from ferret.core.settings import FerretSettings

logger = logging.getLogger(__name__)


def repair_command(corpus: str) -> str:
    return f"ferret index repair --corpus {corpus}"


@dataclass
class RepairReport:
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    """(external id, reason) of the documents quarantined by this repair."""
    unreadable: list[int] = field(default_factory=list)
    """Version numbers that could not be loaded (now failed)."""
    rebuilt: IndexVersion | None = None
    promoted: bool = False
    expanded: list[int] = field(default_factory=list)
    """Failed version numbers that held a document expansion: not rebuilt (their queries belong to a pipeline run;
    running the task's pipeline again with ``--expand`` makes a new one)."""


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Held by the building process; the OS releases it if that process dies, even by SIGKILL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_is_free(path: Path) -> bool:
    if not path.exists():
        return True
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


class VersionedCollection:
    def __init__(self, session: Session, settings: FerretSettings, backend: IndexBackend, corpus: Corpus) -> None:
        self.session = session
        self.settings = settings
        self.backend = backend
        self.corpus = corpus
        self.writer = QuarantineWriter(backend)
        self.unreadable: list[tuple[IndexVersion, str]] = []
        """Live versions a sync had to skip because they cannot be loaded; see ``replace_unreadable``."""

    @property
    def alias(self) -> str:
        return self.corpus.name

    def _points(self, model: ModelVersion, expansion: Expansion | None = None) -> PointBuilder:
        encoder = load_encoder(model.path, self.settings)
        # The collection's searches encode queries with this model: its ONNX export is made now, not by a search.
        prepare_query_encoder(model.path, self.settings)
        stored = None
        if expansion is not None and (plain := self.live_version(model)) is not None:
            # only the sparse vectors differ: the dense ones are read from the model's plain version, not encoded
            stored = partial(self.backend.dense_vectors, plain.collection)
        return PointBuilder(
            encoder,
            sparse_encoder_for(self.session, self.corpus),
            batch_size=self.settings.encode_batch_size,
            expansion=expansion.texts if expansion is not None else None,
            stored_dense=stored,
        )

    def prefetch_embeddings(self, texts: Sequence[str]) -> None:
        """Encode passage texts (``passage_text(title, text)``) once per model of the live versions, ahead of the
        ``sync`` calls that will store them: the vectors wait in each encoder's passage memo
        (``DualEncoder.encode_passages``; a batch beyond its 20,000 passages is partly encoded again), so those calls
        only look them up.

        Why: a push job applies its batch in slices of a few documents, each its own transaction (SQLite has one
        write lock), and each slice embedded inside its transaction, ~30 passages at a time. Encoding the whole
        batch first, before any of those write transactions, runs full encoder batches and keeps the write lock
        only for the database and index writes: the next push was accepted in 84 ms instead of waiting 8 s for that
        lock (benchmarks/RESULTS.md, issue 16 second session; throughput itself moved within the noise)."""
        unique = list(dict.fromkeys(texts))
        if not unique:
            return
        for path in sorted({v.model_version.path for v in live_index_versions(self.session, self.corpus)}):
            load_encoder(path, self.settings).encode_passages(unique, batch_size=self.settings.encode_batch_size)

    def _lock_path(self, index_version: IndexVersion) -> Path:
        return self.settings.home / "locks" / f"{index_version.collection}.lock"

    def recover_abandoned_builds(self) -> list[IndexVersion]:
        """Mark ``failed`` (and drop the partial collection of) builds whose process died without cleaning up."""
        abandoned = [
            v
            for v in list_index_versions(self.session, self.corpus)
            if v.state == IndexState.BUILDING and _lock_is_free(self._lock_path(v))
        ]
        for index_version in abandoned:
            self.backend.drop_collection(index_version.collection)
            index_version.state = IndexState.FAILED
            index_version.error = "the build process stopped before finishing"
            self._lock_path(index_version).unlink(missing_ok=True)
        self.session.commit()
        return abandoned

    def live_version(self, model: ModelVersion) -> IndexVersion | None:
        """A live (ready or active) version of this corpus built by ``model`` without expansion, if any."""
        return next(iter(plain_index_versions(self.session, self.corpus, model)), None)

    def publish(
        self,
        model: ModelVersion,
        *,
        reuse: IndexVersion | None = None,
        promote: bool = False,
        progress: Progress = quiet,
        on_built: Callable[[IndexVersion], None] | None = None,
        actor: str = SYSTEM_ACTOR,
    ) -> IndexVersion:
        """Build or reuse, then promote (recorded as ``actor``'s): the one path from a model to the version search
        reads.

        ``reuse`` is a live version the caller found (a redelivered job's own build, a live version of the model);
        without one, ``model`` is built into a new version and ``on_built`` is told. With ``promote`` the version
        becomes active and versions beyond the newest ``FERRET_KEEP_INDEX_VERSIONS`` are collected.
        """
        index_version = reuse
        if index_version is None:
            index_version = self.build(model, progress=progress)
            if on_built is not None:
                on_built(index_version)
        if promote:
            self.promote(index_version, actor=actor)
            self.collect()
        return index_version

    def build(
        self, model: ModelVersion, *, progress: Progress = quiet, expansion: Expansion | None = None
    ) -> IndexVersion:
        """Embed every passage into a new collection; returns the version in state ``ready``, not yet active.

        With ``expansion`` the passages' BM25 vectors also hold its texts and the version records it
        (``IndexVersion.expansion``): such a version is searched only by a configuration that names it. Later syncs
        write changed passages without it (their queries were written for the old text)."""
        total = indexable_passage_count(self.session, self.corpus)
        if total == 0:
            raise ConflictError(f"Corpus {self.corpus.name!r} has no passages; ingest documents before indexing.")
        self.recover_abandoned_builds()
        index_version = create_index_version(self.session, self.corpus, model, self.backend.kind)
        index_version.passage_count = total
        if expansion is not None:
            index_version.expansion = expansion.record()
        try:
            with _build_lock(self._lock_path(index_version)):  # taken before the row is visible to others
                self.session.commit()  # the building row is visible, so a crash leaves a trace to clean up
                self._fill(index_version, model, total, progress, expansion)
        finally:
            self._lock_path(index_version).unlink(missing_ok=True)
        return index_version

    def _fill(
        self,
        index_version: IndexVersion,
        model: ModelVersion,
        total: int,
        progress: Progress,
        expansion: Expansion | None = None,
    ) -> None:
        try:
            points = self._points(model, expansion)
            self.backend.create_collection(index_version.collection, model.dimension)
            done = 0
            by_length = passage_ids_by_length(self.session, self.corpus)
            for rows in iter_passages(self.session, self.corpus, passage_ids=by_length, batch_size=256):
                self.writer.write(index_version.collection, rows, points)
                done += len(rows)
                progress("indexing", done / total)
            self.backend.finalize(index_version.collection)
            self.session.flush()  # quarantined documents leave the expected count
            total = indexable_passage_count(self.session, self.corpus)
            count = self.backend.count(index_version.collection)
            if count != total:
                raise RuntimeError(f"collection holds {count} points for {total} passages")
        except BaseException as exc:
            self.session.rollback()
            self.backend.drop_collection(index_version.collection)
            index_version.state = IndexState.FAILED
            index_version.error = (
                "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            )
            self.session.commit()
            raise
        index_version.point_count = count
        index_version.passage_count = total
        index_version.state = IndexState.READY
        index_version.ready_at = utcnow()
        self.session.commit()

    def promote(self, index_version: IndexVersion, *, actor: str = SYSTEM_ACTOR, via: str = PROMOTE) -> IndexVersion:
        """Make a ready version the one search reads: one atomic alias swap, committed with the database record, the
        activation history and the audit trail (naming ``actor``).

        The rows are flushed before the swap and committed after it; if the swap fails nothing is committed, and if
        the commit fails the alias is swapped back, so history and alias never disagree."""
        if index_version.corpus_id != self.corpus.id:
            raise ConflictError("That index version belongs to another corpus.")
        if index_version.state == IndexState.ACTIVE:
            return index_version
        if index_version.state != IndexState.READY:
            raise ConflictError(
                f"Index version {index_version.version} is {index_version.state.value}; "
                "only a ready version can be promoted."
            )
        previous = active_index_version(self.session, self.corpus)
        restore = self.backend.resolve_alias(self.alias)
        if previous is not None:
            previous.state = IndexState.READY
        index_version.state = IndexState.ACTIVE
        index_version.activated_at = utcnow()
        record_activation(self.session, self.corpus, INDEX, index_version.version, actor=actor, via=via)
        record_event(  # one event, named by what the admin did: index.promote or index.rollback
            self.session,
            actor,
            f"index.{via}",
            self.corpus.name,
            {"version": index_version.version, "previous": previous.version if previous is not None else None},
        )
        collection = index_version.collection
        try:
            self.session.flush()
            self.backend.set_alias(self.alias, collection)
        except BaseException:
            self.session.rollback()
            raise
        try:
            self.session.commit()
        except BaseException:
            self.session.rollback()
            if restore is None:
                self.backend.delete_alias(self.alias)
            else:
                self.backend.set_alias(self.alias, restore)
            raise
        return index_version

    def rollback(self, *, actor: str = SYSTEM_ACTOR) -> IndexVersion:
        """Re-activate the version active before the current one; each rollback goes one step further back in the
        activation history (v3 → v2 → v1), passing over versions that no longer serve."""
        current = active_index_version(self.session, self.corpus)
        live = {v.version: v for v in live_index_versions(self.session, self.corpus)}
        number = rollback_target(
            self.session, self.corpus, INDEX, is_live=lambda n: n in live and (current is None or n != current.version)
        )
        if number is None:
            where = (
                f"version {current.version} is the oldest activation still ready"
                if current is not None
                else "no version is active"
            )
            nothing = f"Corpus {self.corpus.name!r} has nothing left to roll back to ({where})"
            raise ConflictError(
                f"{nothing}; promote a version by number with `ferret index promote`.",
                over_http=f"{nothing}; promote a version with POST /v1/corpora/{self.corpus.name}/index-versions/"
                "{version}/promote.",
            )
        return self.promote(live[number], actor=actor, via=ROLLBACK)

    def collect(self, keep: int | None = None) -> list[IndexVersion]:
        """Retire ready versions beyond the newest ``keep`` and remove failed leftovers; the active one stays."""
        keep = self.settings.keep_index_versions if keep is None else keep
        if keep < 0:
            raise InvalidInputError("--keep must be 0 or more.")
        self.recover_abandoned_builds()
        retired: list[IndexVersion] = []
        ready = [v for v in list_index_versions(self.session, self.corpus) if v.state == IndexState.READY]
        for index_version in sorted(ready, key=lambda v: v.version, reverse=True)[keep:]:
            self.backend.drop_collection(index_version.collection)  # refused while a server has it open
            index_version.state = IndexState.RETIRED
            self.session.commit()  # each one recorded as its files go, whatever happens to the next
            retired.append(index_version)
        for index_version in list_index_versions(self.session, self.corpus):
            if index_version.state == IndexState.FAILED and self.backend.collection_exists(index_version.collection):
                self.backend.drop_collection(index_version.collection)
        self.session.commit()
        return retired

    def sync(self, upsert_passage_ids: Sequence[int], delete_passage_ids: Sequence[int]) -> None:
        """Apply an ingest's changes to every live version, each embedded with its own model.

        A version that cannot be loaded is skipped (listed in ``unreadable``; the caller replaces it after its
        commit), so one broken shard never blocks pushes and deletions on the others."""
        readable: list[IndexVersion] = []
        for index_version in live_index_versions(self.session, self.corpus):
            collection = index_version.collection
            try:
                self.backend.delete(collection, [point_id(self.corpus.id, pid) for pid in delete_passage_ids])
                if upsert_passage_ids:
                    points = self._points(index_version.model_version)
                    for rows in iter_passages(
                        self.session, self.corpus, passage_ids=upsert_passage_ids, batch_size=256
                    ):
                        self.writer.write(collection, rows, points)
            except UnreadableCollectionError as error:
                self.unreadable.append((index_version, error.reason))
                continue
            readable.append(index_version)
        refused = [point_id(self.corpus.id, pid) for pid in self.writer.refused_passage_ids]
        if readable:
            self.session.flush()  # quarantined documents leave the count
            passages = indexable_passage_count(self.session, self.corpus)
        for index_version in readable:
            if refused:  # another version may have taken a document this one refused
                self.backend.delete(index_version.collection, refused)
            # Both counts follow every diff, so `ferret index list` never shows the build's stale passage count.
            index_version.point_count = self.backend.count(index_version.collection)
            index_version.passage_count = passages

    # -- versions that cannot be loaded -------------------------------------------------------------------------
    def replace_unreadable(self, index_version: IndexVersion, reason: str) -> IndexVersion | None:
        """Mark a version that cannot be loaded ``failed``; if it was active, promote the newest ready version
        that loads. Commits. Returns the version now active (None: nothing left to serve)."""
        was_active = index_version.state == IndexState.ACTIVE or self.backend.resolve_alias(self.alias) == (
            index_version.collection
        )
        if index_version.state != IndexState.FAILED:
            index_version.state = IndexState.FAILED
            index_version.error = f"cannot be loaded: {reason}"[:2_000]
            record_event(
                self.session,
                SYSTEM_ACTOR,
                "index.unreadable",
                self.corpus.name,
                {"version": index_version.version, "reason": reason[:500]},
            )
        if not was_active:
            self.session.commit()
            return active_index_version(self.session, self.corpus)
        ready = [v for v in live_index_versions(self.session, self.corpus) if v.state == IndexState.READY]
        for candidate in sorted(ready, key=lambda v: (v.activated_at is not None, v.version), reverse=True):
            try:
                self.backend.count(candidate.collection)  # loads the shard
            except UnreadableCollectionError as error:
                candidate.state = IndexState.FAILED
                candidate.error = f"cannot be loaded: {error.reason}"[:2_000]
                continue
            logger.warning(
                "%s; serving version %d instead", self.unreadable_sentence(index_version, reason), candidate.version
            )
            return self.promote(candidate)
        self.session.commit()
        return None

    def replace_all_unreadable(self) -> None:
        """After an ingest's commit: replace the versions its sync found unreadable."""
        found, self.unreadable = self.unreadable, []
        for index_version, reason in found:
            self.replace_unreadable(index_version, reason)

    def unreadable_sentence(self, index_version: IndexVersion, reason: str) -> str:
        short = reason if len(reason) <= 160 else reason[:159] + "…"
        return (
            f"Index version {index_version.version} of corpus {self.corpus.name!r} cannot be loaded ({short}); "
            f"run `{repair_command(self.corpus.name)}` to rebuild it from the database"
        )

    def unavailable(self, index_version: IndexVersion, reason: str) -> UnavailableError:
        return UnavailableError(f"{self.unreadable_sentence(index_version, reason)} (no earlier version can serve).")

    def repair(self, *, actor: str = SYSTEM_ACTOR, progress: Progress = quiet) -> RepairReport:
        """Quarantine stored documents beyond the payload limits, fail the versions that cannot be loaded, and
        rebuild the newest of those with its model (promoted if it was the one search read)."""
        report = RepairReport()
        for documents in indexable_documents(self.session, self.corpus):
            for document in documents:
                reason = stored_document_problem(document)
                if reason is not None:
                    passages = passage_ids_of_documents(self.session, [document.id])
                    document.quarantine_reason = reason
                    report.quarantined.append((document.external_id, reason))
                    for index_version in live_index_versions(self.session, self.corpus):
                        with suppress(UnreadableCollectionError):  # found and failed just below
                            self.backend.delete(
                                index_version.collection, [point_id(self.corpus.id, pid) for pid in passages]
                            )
        self.session.commit()
        broken: list[tuple[IndexVersion, bool]] = []
        for index_version in live_index_versions(self.session, self.corpus):
            try:
                self.backend.count(index_version.collection)
            except UnreadableCollectionError as error:
                was_active = index_version.state == IndexState.ACTIVE
                self.replace_unreadable(index_version, error.reason)
                broken.append((index_version, was_active))
                report.unreadable.append(index_version.version)
        report.expanded = [v.version for v, _ in broken if v.expansion]
        # A plain rebuild of an expanded version would be a duplicate of its model's plain version, not the version
        # its configuration names; such a version is rebuilt only when nothing else is left to serve.
        plain = [pair for pair in broken if not pair[0].expansion]
        if plain or (broken and active_index_version(self.session, self.corpus) is None):
            newest, was_active = max(plain or broken, key=lambda pair: pair[0].version)
            report.rebuilt = self.build(newest.model_version, progress=progress)
            if was_active or active_index_version(self.session, self.corpus) is None:
                self.promote(report.rebuilt, actor=actor)
                report.promoted = True
        for index_version, _ in broken:
            self.backend.drop_collection(index_version.collection)
        record_event(
            self.session,
            actor,
            "index.repair",
            self.corpus.name,
            {
                "quarantined": len(report.quarantined),
                "unreadable": report.unreadable,
                "rebuilt": report.rebuilt.version if report.rebuilt is not None else None,
                "expanded": report.expanded,
            },
        )
        self.session.commit()
        return report
