"""Convex fusion of normalised scores beside RRF (Bruch et al. 2023): the arithmetic, then Ferret's fused search on
both index backends (the ``index_backend`` fixture), access filter inside Qdrant's query and ties by point id."""

from __future__ import annotations

import numpy as np
import pytest

from ferret.core.errors import InvalidInputError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import IndexPoint, SearchHit, SearchRequest, SparseVector, point_id
from ferret.core.search.fusion import Fusion, convex_fuse, fuse, normalised, rrf_fuse
from ferret.core.search.searcher import fused_search

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]
DIMENSION = 384


def hits(*scored: tuple[str, float]) -> list[SearchHit]:
    return [SearchHit(point, score, {"external_id": point}) for point, score in scored]


def test_min_max_and_theoretical_min_max() -> None:
    dense = hits(("a", 0.8), ("b", 0.6), ("c", 0.4))
    assert normalised(dense, "dense", "minmax") == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0})
    # theoretical minimum of a cosine is -1: (0.6 + 1) / (0.8 + 1)
    assert normalised(dense, "dense", "tmm") == pytest.approx({"a": 1.0, "b": 1.6 / 1.8, "c": 1.4 / 1.8})
    assert normalised(hits(("a", 4.0), ("b", 1.0)), "sparse", "tmm") == pytest.approx({"a": 1.0, "b": 0.25})
    assert normalised(hits(("a", 2.0)), "sparse", "minmax") == {"a": 1.0}
    assert normalised([], "dense", "tmm") == {}


def test_the_weight_moves_the_ranking_from_bm25_to_dense() -> None:
    dense = hits(("a", 0.9), ("b", 0.5), ("c", 0.1))
    sparse = hits(("c", 9.0), ("b", 5.0), ("d", 1.0))
    order = {w: [h.id for h in convex_fuse(dense, sparse, weight=w, normalisation="minmax")] for w in (0.0, 1.0)}
    assert order[1.0][:3] == ["a", "b", "c"]
    assert order[0.0] == ["c", "b", "a", "d"]  # a and d both sit at BM25's floor: tie, point-id order
    middle = convex_fuse(dense, sparse, weight=0.5, normalisation="minmax")
    # b is second in both lists; a and c are first in one and last in the other; d only in BM25, at its floor
    assert {h.id: h.score for h in middle} == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.0})
    assert [h.id for h in middle] == ["a", "b", "c", "d"]  # equal scores in point-id order


def test_a_candidate_missing_from_one_list_gets_that_lists_lowest_score() -> None:
    dense = hits(("a", 0.9), ("b", 0.5))
    sparse = hits(("c", 3.0))
    fused = {h.id: h.score for h in convex_fuse(dense, sparse, weight=0.5, normalisation="minmax")}
    # c: dense floor (0) and BM25 1.0; a: dense 1.0 and BM25 floor (1.0, the only BM25 score)
    assert fused == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.5})


def test_a_list_shorter_than_its_depth_is_complete_so_a_missing_candidate_gets_the_scales_floor() -> None:
    """BM25 returns only passages that share a query term: asked for 100 and given 2, it says every other
    candidate's BM25 score is 0, not 'at most the second's'."""
    dense = hits(("a", 0.9), ("b", 0.5), ("c", 0.4))
    sparse = hits(("c", 6.0), ("b", 5.0))
    complete = {h.id: h.score for h in convex_fuse(dense, sparse, weight=0.5, normalisation="tmm", depth=100)}
    assert complete["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)
    assert complete["c"] == pytest.approx(0.5 * 1.4 / 1.9 + 0.5 * 1.0)
    # cut at the depth (2 of 2): a's BM25 score is at most b's, so it gets b's
    cut = {h.id: h.score for h in convex_fuse(dense, sparse, weight=0.5, normalisation="tmm", depth=2)}
    assert cut["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 5.0 / 6.0)
    assert [h.id for h in fuse(dense, sparse, Fusion("convex", 0.5), limit=3, depth=100)] == ["c", "b", "a"]
    assert [h.id for h in fuse(dense, sparse, Fusion("convex", 0.5), limit=3, depth=2)] == ["a", "c", "b"]


def test_rrf_is_reciprocal_rank_with_ties_by_point_id() -> None:
    fused = rrf_fuse(hits(("x", 1.0), ("y", 0.5)), hits(("y", 3.0), ("x", 2.0)), k=60)
    assert [h.id for h in fused] == ["x", "y"]
    assert fused[0].score == pytest.approx(1 / 60 + 1 / 61)
    assert [h.id for h in fuse(hits(("x", 1.0)), hits(("y", 1.0)), Fusion(), limit=1)] == ["x"]


def test_rrf_with_a_limit_keeps_the_head_of_the_full_fusion() -> None:
    dense = hits(*((f"d{i:02d}", 50.0 - i) for i in range(30)), *((f"s{i:02d}", 10.0 - i) for i in range(0, 30, 3)))
    sparse = hits(*((f"s{i:02d}", 40.0 - i) for i in range(30)), ("d05", 1.0), ("d00", 0.5))
    full = rrf_fuse(dense, sparse, k=60)
    assert rrf_fuse(dense, sparse, k=60, limit=7) == full[:7]
    assert len(full) == 60


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "dbsf"}, "Fusion method"),
        ({"weight": 1.5}, "between 0 and 1"),
        ({"normalisation": "z"}, "Normalisation"),
    ],
)
def test_bad_fusion_settings_are_one_sentence_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Fusion(**fields)  # type: ignore[arg-type]


def test_fusion_round_trips_through_json() -> None:
    fusion = Fusion("convex", 0.3, "minmax")
    assert Fusion.from_json(fusion.to_json()) == fusion
    assert fusion.describe() == "convex α=0.30 (minmax)"
    assert Fusion.from_json({}) == Fusion()


def _six_points(index_backend: IndexBackend, collection: str, bm25_term: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> str:
    """Point i: dense cosine 1 − 0.1·i with the query; BM25 weight i for term 5 when i is in ``bm25_term`` (else a
    term the query lacks); points 2 and 5 in group 'hr'."""
    index_backend.create_collection(collection, DIMENSION)
    points = []
    for passage_id in range(1, 7):
        cosine = 1.0 - 0.1 * passage_id
        vector = np.zeros(DIMENSION, dtype=np.float32)
        vector[:2] = [cosine, np.sqrt(1 - cosine**2)]
        groups = ["hr"] if passage_id in (2, 5) else ["public"]
        payload = {"passage_id": passage_id, "document_id": passage_id, "external_id": f"d{passage_id}",
                   "acl_groups": groups, "source": "wiki", "title": "", "text": "", "metadata": {}}  # fmt: skip
        term = 5 if passage_id in bm25_term else 9
        points.append(IndexPoint(point_id(7, passage_id), vector, SparseVector([term], [float(passage_id)]), payload))
    index_backend.upsert(collection, points)
    index_backend.finalize(collection)
    return collection


def test_fused_search_on_the_index_keeps_the_access_filter_and_follows_the_weight(
    index_backend: IndexBackend, names: dict[str, str]
) -> None:
    """Six points: dense prefers 1..6, BM25 prefers 6..1; points 2 and 5 belong to group 'hr'. The access filter
    is inside both first-stage queries, so an 'eng' caller never sees them, whatever the weight."""
    collection = _six_points(index_backend, names["v1"])
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[0] = 1.0

    def ranked(weight: float, groups: list[str] | None) -> list[str]:
        request = SearchRequest(
            limit=6, mode="hybrid", dense=query, sparse=SparseVector([5], [1.0]), acl_groups=groups, exact=True
        )
        found = fused_search(index_backend, collection, [request], Fusion("convex", weight, "minmax"))[0]
        return [hit.payload["external_id"] for hit in found]

    assert ranked(1.0, None) == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert ranked(0.0, None) == ["d6", "d5", "d4", "d3", "d2", "d1"]
    assert ranked(1.0, ["eng", "public"]) == ["d1", "d3", "d4", "d6"]
    assert ranked(0.0, ["eng", "public"]) == ["d6", "d4", "d3", "d1"]
    # at 0.5 the two linear scales nearly cancel: the order must still be the same on every call
    middle = ranked(0.5, None)
    assert sorted(middle) == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert all(ranked(0.5, None) == middle for _ in range(5))


def test_fused_search_gives_passages_without_the_query_term_no_bm25_share(
    index_backend: IndexBackend, names: dict[str, str]
) -> None:
    """A one-word query whose term only points 5 and 6 hold: BM25 returns 2 of the 100 candidates it was asked for,
    so the four dense-only points score 0 for BM25, and at α=0.5 the two points that match both ways come first
    (with the list's lowest score as their floor, points 1 and 2 came first)."""
    collection = _six_points(index_backend, names["v1"], bm25_term=(5, 6))
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[0] = 1.0
    request = SearchRequest(limit=6, mode="hybrid", dense=query, sparse=SparseVector([5], [1.0]), exact=True)
    assert request.candidates == 100

    found = fused_search(index_backend, collection, [request], Fusion("convex", 0.5, "tmm"))[0]

    assert [hit.payload["external_id"] for hit in found] == ["d6", "d5", "d1", "d2", "d3", "d4"]


def test_fused_search_reads_payloads_for_the_kept_hits_only(
    index_backend: IndexBackend, names: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first-stage queries return every candidate without payloads; one read fetches the kept hits' (issue 16)."""
    collection = _six_points(index_backend, names["v1"])
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[0] = 1.0
    first_stage = SearchRequest(limit=6, mode="dense", dense=query, exact=True, with_payload=False)
    assert [hit.payload for hit in index_backend.search(collection, first_stage)] == [{}] * 6
    read: list[list[str]] = []
    payloads = index_backend.payloads

    def reading(name: str, point_ids: list[str]) -> dict[str, dict[str, object]]:
        read.append(list(point_ids))
        return payloads(name, point_ids)

    monkeypatch.setattr(index_backend, "payloads", reading)
    request = SearchRequest(limit=2, mode="hybrid", dense=query, sparse=SparseVector([5], [1.0]), exact=True)

    found = fused_search(index_backend, collection, [request], Fusion("convex", 1.0, "minmax"))[0]

    assert [hit.payload["external_id"] for hit in found] == ["d1", "d2"]
    assert read == [[hit.id for hit in found]]
    assert payloads(collection, [point_id(7, 1), point_id(7, 99)]).keys() == {
        point_id(7, 1)
    }  # a gone point is left out
