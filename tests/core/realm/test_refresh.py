"""The asynchronous index refresher on the real embedded Qdrant: internal versions, swaps, failures, no waiting.

The embedder here is a plain function of the snapshot (the refresher only needs weights → vectors); the index,
its aliases and collections are the real Qdrant Edge backend.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.realm.masking import CorpusPassage
from ferret.core.realm.refresh import IndexRefresher, MatrixRefreshStore, QdrantRefreshStore
from ferret.core.settings import FerretSettings

PASSAGES = [CorpusPassage(i, i // 2, f"passage {i}") for i in range(12)]


class SnapshotEmbedder:
    """Unit vectors that put passage ``snapshot['target']`` closest to the all-ones query; can block or fail."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()

    def __call__(self, snapshot: dict[str, Any], texts: Sequence[str]) -> np.ndarray:
        self.release.wait(30)
        if snapshot.get("fail"):
            raise RuntimeError("the snapshot could not be embedded")
        vectors = np.full((len(texts), 4), -1.0, dtype=np.float32)
        vectors[:, 0] = np.arange(len(texts))
        vectors[snapshot["target"]] = 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def top(refresher: IndexRefresher) -> int:
    ranked, _ = refresher.search(np.ones((1, 4), dtype=np.float32) / 2, limit=1)
    return ranked[0][0]


def test_refresh_swaps_internal_versions_without_blocking(settings: FerretSettings) -> None:
    backend = EdgeIndexBackend(settings.qdrant_path)
    backend.create_collection("docs__v1", 4)
    backend.set_alias("docs", "docs__v1")  # the corpus's served version
    embed = SnapshotEmbedder()
    store = QdrantRefreshStore(backend, "docs", run="t1")
    refresher = IndexRefresher(store, PASSAGES, embed)
    try:
        first = refresher.build_now({"target": 3}, step=0)
        assert (first.version, first.step, top(refresher)) == (1, 0, 3)

        embed.release.clear()  # the next build hangs until released: the trainer must not wait for it
        refresher.submit({"target": 5}, step=10)
        refresher.submit({"target": 7}, step=20)  # replaces the queued snapshot if the build has not started
        assert refresher.current() == first and top(refresher) == 3
        embed.release.set()
        assert refresher.wait_idle(60)
        newest = refresher.current()
        assert newest is not None and newest.step == 20 and top(refresher) == 7
        assert backend.resolve_alias("docs__realmt1") == newest.handle

        refresher.submit({"target": 9, "fail": True}, step=30)
        assert refresher.wait_idle(60)
        assert refresher.current() == newest and top(refresher) == 7  # training goes on with the last good index
        assert [r.step for r in refresher.log.failed] == [30]
        internal = [c for c in backend.list_collections() if c.startswith("docs__realmt1_r")]
        assert len(internal) <= 2 and newest.handle in internal  # the failed one left nothing; old ones dropped
    finally:
        refresher.close()
        store.close()
    assert backend.resolve_alias("docs") == "docs__v1"  # never the served version
    assert backend.list_collections() == ["docs__v1"]
    backend.close()


def test_matrix_store_is_exact_inner_product() -> None:
    store = MatrixRefreshStore()
    refresher = IndexRefresher(store, PASSAGES, SnapshotEmbedder())
    try:
        refresher.build_now({"target": 4}, step=0)
        ranked, view = refresher.search(np.ones((2, 4), dtype=np.float32), limit=3)
        assert ranked[0][0] == 4 and len(ranked[1]) == 3 and view.version == 1
    finally:
        refresher.close()
