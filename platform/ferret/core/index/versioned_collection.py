"""Index versions of one corpus: built completely, promoted by one atomic alias swap, rolled back, collected.

Life of a version (``IndexState``): ``building`` → ``ready`` → ``active`` → ``ready`` (superseded, kept for
rollback) → ``retired`` (collection deleted). A build that fails or is interrupted is marked ``failed`` and its
partial collection removed; the alias never points at an incomplete collection.

Example:
    >>> versions = VersionedCollection(session, settings, backend, corpus)
    >>> v = versions.build(registry.ensure_base())
    >>> versions.promote(v)
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.document import iter_passages, passage_ids_by_length
from ferret.core.db.index_version import (
    LIVE_STATES,
    active_index_version,
    create_index_version,
    list_index_versions,
    live_index_versions,
)
from ferret.core.db.models import Corpus, IndexState, IndexVersion, ModelVersion, Passage, utcnow
from ferret.core.encoder.registry import load_encoder
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.points import PointBuilder, sparse_encoder_for
from ferret.core.index.types import point_id
from ferret.core.progress import Progress, quiet
from ferret.core.settings import FerretSettings


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

    @property
    def alias(self) -> str:
        return self.corpus.name

    def _points(self, model: ModelVersion) -> PointBuilder:
        encoder = load_encoder(model.path, self.settings)
        return PointBuilder(
            encoder, sparse_encoder_for(self.session, self.corpus), batch_size=self.settings.encode_batch_size
        )

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
        """A live (ready or active) version of this corpus built by ``model``, if any."""
        versions = list_index_versions(self.session, self.corpus)
        return next((v for v in versions if v.model_version_id == model.id and v.state in LIVE_STATES), None)

    def publish(
        self,
        model: ModelVersion,
        *,
        reuse: IndexVersion | None = None,
        promote: bool = False,
        progress: Progress = quiet,
        on_built: Callable[[IndexVersion], None] | None = None,
    ) -> IndexVersion:
        """Build or reuse, then promote: the one path from a model to the version search reads.

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
            self.promote(index_version)
            self.collect()
        return index_version

    def build(self, model: ModelVersion, *, progress: Progress = quiet) -> IndexVersion:
        """Embed every passage into a new collection; returns the version in state ``ready``, not yet active."""
        total = self.session.scalar(select(func.count(Passage.id)).where(Passage.corpus_id == self.corpus.id)) or 0
        if total == 0:
            raise ConflictError(f"Corpus {self.corpus.name!r} has no passages; ingest documents before indexing.")
        self.recover_abandoned_builds()
        index_version = create_index_version(self.session, self.corpus, model, self.backend.kind)
        index_version.passage_count = total
        try:
            with _build_lock(self._lock_path(index_version)):  # taken before the row is visible to others
                self.session.commit()  # the building row is visible, so a crash leaves a trace to clean up
                self._fill(index_version, model, total, progress)
        finally:
            self._lock_path(index_version).unlink(missing_ok=True)
        return index_version

    def _fill(self, index_version: IndexVersion, model: ModelVersion, total: int, progress: Progress) -> None:
        try:
            points = self._points(model)
            self.backend.create_collection(index_version.collection, model.dimension)
            done = 0
            by_length = passage_ids_by_length(self.session, self.corpus)
            for rows in iter_passages(self.session, self.corpus, passage_ids=by_length, batch_size=256):
                self.backend.upsert(index_version.collection, points.build(rows))
                done += len(rows)
                progress("indexing", done / total)
            self.backend.finalize(index_version.collection)
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
        index_version.state = IndexState.READY
        index_version.ready_at = utcnow()
        self.session.commit()

    def promote(self, index_version: IndexVersion) -> IndexVersion:
        """Make a ready version the one search reads: one atomic alias swap, then the database record."""
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
        self.backend.set_alias(self.alias, index_version.collection)
        if previous is not None:
            previous.state = IndexState.READY
        index_version.state = IndexState.ACTIVE
        index_version.activated_at = utcnow()
        self.session.commit()
        return index_version

    def rollback(self) -> IndexVersion:
        """Re-activate the most recently active ready version before the current one."""
        current = active_index_version(self.session, self.corpus)
        candidates = [
            v
            for v in live_index_versions(self.session, self.corpus)
            if v.state == IndexState.READY and v.activated_at is not None and (current is None or v.id != current.id)
        ]
        if not candidates:
            raise NotFoundError(f"Corpus {self.corpus.name!r} has no earlier ready version to roll back to.")
        target = max(candidates, key=lambda v: v.activated_at or utcnow())
        return self.promote(target)

    def collect(self, keep: int | None = None) -> list[IndexVersion]:
        """Retire ready versions beyond the newest ``keep`` and remove failed leftovers; the active one stays."""
        keep = self.settings.keep_index_versions if keep is None else keep
        if keep < 0:
            raise InvalidInputError("--keep must be 0 or more.")
        self.recover_abandoned_builds()
        retired: list[IndexVersion] = []
        ready = [v for v in list_index_versions(self.session, self.corpus) if v.state == IndexState.READY]
        for index_version in sorted(ready, key=lambda v: v.version, reverse=True)[keep:]:
            self.backend.drop_collection(index_version.collection)
            index_version.state = IndexState.RETIRED
            retired.append(index_version)
        for index_version in list_index_versions(self.session, self.corpus):
            if index_version.state == IndexState.FAILED and self.backend.collection_exists(index_version.collection):
                self.backend.drop_collection(index_version.collection)
        self.session.commit()
        return retired

    def sync(self, upsert_passage_ids: Sequence[int], delete_passage_ids: Sequence[int]) -> None:
        """Apply an ingest's changes to every live version, each embedded with its own model."""
        for index_version in live_index_versions(self.session, self.corpus):
            collection = index_version.collection
            self.backend.delete(collection, [point_id(self.corpus.id, pid) for pid in delete_passage_ids])
            if upsert_passage_ids:
                points = self._points(index_version.model_version)
                for rows in iter_passages(self.session, self.corpus, passage_ids=upsert_passage_ids, batch_size=256):
                    self.backend.upsert(collection, points.build(rows))
            index_version.point_count = self.backend.count(collection)
