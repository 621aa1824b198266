"""The same data gives the same ranking, build after build (issue 11, item 14).

Qdrant Edge's sparse dot products differ in their last bits from one build of the same points to the next, which
reordered near-equal BM25 candidates and moved the demo's hybrid nDCG@10 between runs (90.5 / 90.6 / 91.1). These
tests build the demo corpus's BM25 vectors several times and compare every ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferret.core.demo import DEMO_DATASET
from ferret.core.eval.beir import iter_corpus, load_queries
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.sparse import SparseEncoder
from ferret.core.index.types import NEAR_TIE, IndexPoint, SearchHit, SearchRequest, point_id, settle_near_ties
from ferret.core.search.fusion import RRF
from ferret.core.search.searcher import fused_search

DIMENSION = 8


def test_near_equal_scores_are_ordered_by_point_id_whatever_their_last_bits() -> None:
    exact = [SearchHit("c", 2.0, {}), SearchHit("a", 2.0, {}), SearchHit("b", 1.0, {})]
    noisy = [SearchHit("c", 2.0 + 4e-6, {}), SearchHit("a", 2.0, {}), SearchHit("b", 1.0, {})]

    assert [hit.id for hit in settle_near_ties(exact)] == ["a", "c", "b"]
    assert [hit.id for hit in settle_near_ties(noisy)] == ["a", "c", "b"]
    assert [hit.id for hit in settle_near_ties([SearchHit("z", 2.1, {}), *exact])] == ["z", "a", "c", "b"]


def test_rebuilding_the_demo_index_gives_identical_rankings(tmp_path: Path) -> None:
    passages = []
    for document in iter_corpus(DEMO_DATASET):
        words = f"{document.title}. {document.text}".split()
        passages += [" ".join(words[start : start + 60]) for start in range(0, len(words), 60)]
    bm25 = SparseEncoder(avg_len=40)
    sparse = bm25.embed_documents(passages)
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((len(passages), DIMENSION)).astype(np.float32)
    points = [
        IndexPoint(point_id(1, number), dense[number], sparse[number], {"passage_id": number})
        for number in range(len(passages))
    ]
    queries = [bm25.embed_query(text) for text in load_queries(DEMO_DATASET).values()]
    query_vectors = rng.standard_normal((len(queries), DIMENSION)).astype(np.float32)
    backend = EdgeIndexBackend(tmp_path)

    def rankings(collection: str) -> tuple[list[list[str]], list[list[str]]]:
        backend.create_collection(collection, DIMENSION)
        backend.upsert(collection, points)
        backend.finalize(collection)
        sparse_requests = [SearchRequest(limit=10, mode="sparse", sparse=query) for query in queries]
        hybrid_requests = [
            SearchRequest(limit=10, mode="hybrid", sparse=query, dense=vector, exact=True)
            for query, vector in zip(queries, query_vectors, strict=True)
        ]
        by_bm25 = [[hit.id for hit in hits] for hits in backend.search_batch(collection, sparse_requests)]
        hybrid = [[hit.id for hit in hits] for hits in fused_search(backend, collection, hybrid_requests, RRF)]
        return by_bm25, hybrid

    try:
        first = rankings("demo__v1")
        for build in range(2, 5):
            assert rankings(f"demo__v{build}") == first, f"build {build} ranks differently"
    finally:
        backend.close()


@pytest.mark.parametrize("score", [0.5, 14.0, 1e-3])
def test_scores_further_apart_than_the_noise_keep_their_order(score: float) -> None:
    hits = [SearchHit("a", score * (1 - 1e-4), {}), SearchHit("b", score, {})]

    assert [hit.id for hit in settle_near_ties(hits)] == ["b", "a"]


def test_ties_are_settled_like_a_neighbour_by_neighbour_walk() -> None:
    """The numpy version cuts runs exactly where a walk over the sorted hits would: many runs, of every length, with
    noise inside the tolerance and gaps just outside it."""

    def walk(hits: list[SearchHit]) -> list[str]:
        settled: list[str] = []
        run: list[SearchHit] = []
        for hit in sorted(hits, key=lambda hit: -hit.score):
            if run and run[-1].score - hit.score > NEAR_TIE * max(abs(run[-1].score), abs(hit.score)):
                settled += sorted(tied.id for tied in run)
                run = []
            run.append(hit)
        return settled + sorted(tied.id for tied in run)

    rng = np.random.default_rng(7)
    for trial in range(200):
        levels = rng.choice([0.0, 0.25, 3.0, 11.5, -2.0], size=rng.integers(0, 40))
        noise = rng.choice([0.0, 2e-7, 5e-6, 3e-5], size=len(levels)) * np.abs(levels)
        hits = [SearchHit(f"p{rng.integers(10**6):06d}", float(s), {}) for s in levels + noise]

        assert [hit.id for hit in settle_near_ties(hits)] == walk(hits), f"trial {trial}"
