"""Hybrid search gives the same results every time, on every index backend (the ``index_backend`` fixture of
conftest), although Qdrant leaves equal fused scores in hash-map order."""

from __future__ import annotations

import numpy as np
import pytest

from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import IndexPoint, SearchHit, SearchRequest, SparseVector, point_id

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

DIMENSION = 384


def external_ids(hits: list[SearchHit]) -> list[str]:
    return [hit.payload["external_id"] for hit in hits]


def test_hybrid_ties_come_back_in_the_same_order_every_time(index_backend: IndexBackend, names: dict[str, str]) -> None:
    """Dense ranks 1..6 against sparse ranks 2,1,4,3,6,5: reciprocal-rank fusion gives three pairs of equal
    scores. Qdrant orders equal fused scores through a hash map, so without a tie-break here the order, and at a
    cut inside a pair the set, changed from one call to the next."""
    collection = names["v1"]
    index_backend.create_collection(collection, DIMENSION)
    dense_scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    sparse_values = [2.0, 3.0, 0.5, 1.0, 0.2, 0.3]
    points = []
    for passage_id, (cosine, weight) in enumerate(zip(dense_scores, sparse_values, strict=True), start=1):
        vector = np.zeros(DIMENSION, dtype=np.float32)
        vector[:2] = [cosine, np.sqrt(1 - cosine**2)]
        payload = {"passage_id": passage_id, "document_id": passage_id, "external_id": f"d{passage_id}",
                   "acl_groups": ["public"], "source": "wiki", "title": "", "text": "", "metadata": {}}  # fmt: skip
        points.append(IndexPoint(point_id(7, passage_id), vector, SparseVector([5], [weight]), payload))
    index_backend.upsert(collection, points)
    index_backend.finalize(collection)
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[0] = 1.0

    def hybrid(limit: int) -> SearchRequest:
        return SearchRequest(limit=limit, mode="hybrid", dense=query, sparse=SparseVector([5], [1.0]), exact=True)

    full = [external_ids(index_backend.search(collection, hybrid(6))) for _ in range(20)]
    cut = [external_ids(index_backend.search(collection, hybrid(3))) for _ in range(20)]
    batched = index_backend.search_batch(collection, [hybrid(3)] * 20)

    assert all(order == full[0] for order in full)
    assert [set(full[0][i : i + 2]) for i in (0, 2, 4)] == [{"d1", "d2"}, {"d3", "d4"}, {"d5", "d6"}]
    assert all(order == full[0][:3] for order in cut)
    assert all(external_ids(hits) == full[0][:3] for hits in batched)
    hits = index_backend.search(collection, hybrid(6))
    assert [hit.id for hit in hits[:2]] == sorted(hit.id for hit in hits[:2])
