"""Asynchronous MIPS index refresh for REALM (Guu et al. 2020, §3.4 "asynchronous MIPS refreshes").

The trainer retrieves its top k from an index built with an older snapshot of the document tower. Every N steps
it hands a snapshot to the refresher and keeps training: a background thread re-embeds the corpus with those
weights into a *new* internal collection, and only when that collection is complete does one atomic alias swap
make it the version the trainer reads. The trainer never waits; it always searches the newest complete version and
records how stale it is (training steps since its snapshot). Snapshots submitted while a build runs replace one
another (only the newest is worth building).

Internal versions live beside the corpus's served versions but under their own alias,
``<corpus>__realm<run>``, with collections ``<corpus>__realm<run>_r<N>``; nothing here touches the corpus's alias
or its ``index_versions`` rows, so search never sees a half-trained retriever. The newest two versions are kept
(a search that resolved the alias just before a swap still finds its collection); older ones are dropped. A
failed build drops its partial collection, is recorded, and leaves training on the last good version.

Example:
    >>> refresher = IndexRefresher(QdrantRefreshStore(backend, "docs", run="7"), passages, embedder)
    >>> refresher.build_now(retriever.doc_snapshot(), step=0)
    >>> refresher.submit(retriever.doc_snapshot(), step=500)  # returns at once
    >>> ids, view = refresher.search(query_vectors, limit=8)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import IndexPoint, SearchRequest, SparseVector, point_id
from ferret.core.realm.masking import CorpusPassage

logger = logging.getLogger(__name__)

Snapshot = dict[str, Any]
Embedder = Callable[[Snapshot, Sequence[str]], np.ndarray]
"""(document-tower weights, passage texts) → unit vectors, one row per text."""


@dataclass(frozen=True)
class IndexView:
    """One complete index version: the handle the store searches, its number, and the step of its snapshot."""

    handle: str
    version: int
    step: int


class RefreshStore(Protocol):
    """Where refreshed index versions live: internal Qdrant collections, or an exact in-memory matrix."""

    def write(self, version: int, passages: Sequence[CorpusPassage], vectors: np.ndarray) -> str: ...

    def activate(self, handle: str) -> None: ...

    def search(self, handle: str, vectors: np.ndarray, limit: int) -> list[list[int]]: ...

    def drop(self, handle: str) -> None: ...


class QdrantRefreshStore:
    """Internal versioned collections through Ferret's index interface (Qdrant Edge or a server)."""

    def __init__(self, backend: IndexBackend, corpus: str, *, run: str, corpus_id: int = 0, exact: bool = True):
        self.backend = backend
        self.alias = f"{corpus}__realm{run}"
        self.corpus_id = corpus_id
        self.exact = exact

    def write(self, version: int, passages: Sequence[CorpusPassage], vectors: np.ndarray) -> str:
        collection = f"{self.alias}_r{version}"
        self.backend.drop_collection(collection)  # a leftover of a killed run with the same name
        self.backend.create_collection(collection, int(vectors.shape[1]))
        try:
            points = [
                IndexPoint(
                    point_id(self.corpus_id, p.passage_id),
                    vectors[i],
                    SparseVector([], []),
                    {"passage_id": p.passage_id, "document_id": p.document_id},
                )
                for i, p in enumerate(passages)
            ]
            self.backend.upsert(collection, points)
            self.backend.finalize(collection)
            if self.backend.count(collection) != len(passages):
                raise RuntimeError(f"collection {collection} is incomplete")
        except BaseException:
            self.backend.drop_collection(collection)
            raise
        return collection

    def activate(self, handle: str) -> None:
        self.backend.set_alias(self.alias, handle)

    def search(self, handle: str, vectors: np.ndarray, limit: int) -> list[list[int]]:
        requests = [SearchRequest(limit=limit, mode="dense", dense=v, exact=self.exact) for v in vectors]
        return [[int(h.payload["passage_id"]) for h in hits] for hits in self.backend.search_batch(handle, requests)]

    def drop(self, handle: str) -> None:
        self.backend.drop_collection(handle)

    def close(self) -> None:
        """Remove every internal version and the alias: they exist only while pre-training runs."""
        self.backend.delete_alias(self.alias)
        for collection in self.backend.list_collections():
            if collection.startswith(f"{self.alias}_r"):
                self.backend.drop_collection(collection)


class MatrixRefreshStore:
    """Exact MIPS over an in-memory passage matrix (the GPU benchmark, where no Qdrant runs)."""

    def __init__(self) -> None:
        self._versions: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def write(self, version: int, passages: Sequence[CorpusPassage], vectors: np.ndarray) -> str:
        handle = f"r{version}"
        self._versions[handle] = (np.asarray([p.passage_id for p in passages]), vectors.astype(np.float32))
        return handle

    def activate(self, handle: str) -> None:
        return None

    def search(self, handle: str, vectors: np.ndarray, limit: int) -> list[list[int]]:
        ids, matrix = self._versions[handle]
        scores = vectors @ matrix.T
        top = np.argsort(-scores, axis=1)[:, :limit]
        return [[int(ids[j]) for j in row] for row in top]

    def drop(self, handle: str) -> None:
        self._versions.pop(handle, None)


@dataclass
class RefreshRecord:
    version: int
    step: int
    seconds: float
    error: str | None = None


@dataclass
class _Pending:
    snapshot: Snapshot
    step: int


@dataclass
class RefreshLog:
    built: list[RefreshRecord] = field(default_factory=list)
    failed: list[RefreshRecord] = field(default_factory=list)


class IndexRefresher:
    """Builds index versions from document-tower snapshots in a background thread; see the module docstring."""

    def __init__(self, store: RefreshStore, passages: Sequence[CorpusPassage], embed: Embedder) -> None:
        self.store = store
        self.passages = list(passages)
        self.embed = embed
        self.log = RefreshLog()
        self._current: IndexView | None = None
        self._previous: IndexView | None = None
        self._pending: _Pending | None = None
        self._next_version = 1
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="realm-index-refresh", daemon=True)
        self._thread.start()

    def current(self) -> IndexView | None:
        with self._lock:
            return self._current

    def build_now(self, snapshot: Snapshot, step: int) -> IndexView:
        """Build synchronously: the first index, before training can retrieve anything."""
        self._build(snapshot, step)
        view = self.current()
        if view is None:
            raise RuntimeError(f"the first index build failed: {self.log.failed[-1].error}")
        return view

    def submit(self, snapshot: Snapshot, step: int) -> None:
        """Queue a snapshot for the background build and return at once (a queued older snapshot is replaced)."""
        with self._lock:
            self._pending = _Pending(snapshot, step)
            self._wake.notify()

    def search(self, vectors: np.ndarray, limit: int) -> tuple[list[list[int]], IndexView]:
        view = self.current()
        if view is None:
            raise RuntimeError("no index version is ready")
        return self.store.search(view.handle, vectors, limit), view

    def wait_idle(self, timeout_s: float = 600.0) -> bool:
        """For tests and the end of a run: wait until no build is pending or running."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while (self._pending is not None or self._busy) and time.monotonic() < deadline:
                self._wake.wait(0.1)
            return self._pending is None and not self._busy

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pending = None
            self._wake.notify_all()
        self._thread.join(timeout=600)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                pending, self._pending, self._busy = self._pending, None, True
            try:
                if pending is not None:
                    self._build(pending.snapshot, pending.step)
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()

    def _build(self, snapshot: Snapshot, step: int) -> None:
        """Embed, write a new version, swap it in; on failure keep the last good version and record why."""
        with self._lock:
            version, self._next_version = self._next_version, self._next_version + 1
        started = time.perf_counter()
        try:
            vectors = self.embed(snapshot, [p.text for p in self.passages])
            handle = self.store.write(version, self.passages, vectors)
            self.store.activate(handle)
        except Exception as exc:  # the trainer goes on with the last good version
            logger.warning("index refresh %d (step %d) failed: %s", version, step, exc)
            self.log.failed.append(RefreshRecord(version, step, time.perf_counter() - started, f"{exc}"))
            return
        with self._lock:
            stale, self._previous, self._current = self._previous, self._current, IndexView(handle, version, step)
        if stale is not None:
            self.store.drop(stale.handle)
        self.log.built.append(RefreshRecord(version, step, time.perf_counter() - started))
