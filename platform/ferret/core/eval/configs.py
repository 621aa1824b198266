"""Score search configurations side by side on a BEIR-layout dataset (the quickstart's closing table), and a
retriever's nDCG@10 at every fusion weight on labelled queries (the benchmarks' reference α curve)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ferret.core.eval.beir import load_qrels, load_queries
from ferret.core.eval.metrics import evaluate_run
from ferret.core.index.types import SearchMode
from ferret.core.search.configuration import SearchPlan
from ferret.core.search.fusion import RRF, Fusion, fuse
from ferret.core.search.searcher import Searcher, dedupe_by_document
from ferret.core.search.tuning import REFERENCE_ALPHAS, candidate_lists


def evaluate_plans(
    searcher: Searcher,
    corpus_name: str,
    dataset: Path,
    plans: Mapping[str, tuple[SearchPlan, SearchMode]],
    *,
    split: str = "test",
) -> dict[str, dict[str, float]]:
    """nDCG@10, Recall@100 and MRR@10 of each named (plan, mode) over the split's queries."""
    queries, qrels = load_queries(dataset), load_qrels(dataset, split)
    query_ids = [q for q in qrels if q in queries]
    scores: dict[str, dict[str, float]] = {}
    for name, (plan, mode) in plans.items():
        results = searcher.search_many(corpus_name, [queries[q] for q in query_ids], k=100, mode=mode, plan=plan)
        run = {
            qid: {r.external_id: float(len(hits) - rank) for rank, r in enumerate(hits)}
            for qid, hits in zip(query_ids, results, strict=True)
        }
        scores[name] = evaluate_run(run, qrels)
    return scores


def fusion_curve(
    searcher: Searcher,
    plan: SearchPlan,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    k: int = 100,
    batch: int = 64,
) -> dict[str, float]:
    """nDCG@10 of ``plan``'s retriever under RRF ("rrf") and at every α of the tuning grid ("0.0" … "1.0"), on
    labelled queries (query id → text). Each query's dense and BM25 candidates are fetched once, as deep as
    ``search_many(k=k)`` fetches them, and fused offline for every setting, as the search would fuse them. The labels
    choose the best point, so it is a reference (is a shortfall the label-free choice of α, or the retriever?), never
    a configuration to promote."""
    fusions: dict[str, Fusion] = {
        "rrf": RRF, **{f"{a:.1f}": Fusion("convex", a, plan.fusion.normalisation) for a in REFERENCE_ALPHAS}
    }  # fmt: skip
    query_ids: Sequence[str] = list(queries)
    runs: dict[str, dict[str, dict[str, float]]] = {key: {} for key in fusions}
    for start in range(0, len(query_ids), batch):  # a bounded number of candidate lists in memory at once
        part = query_ids[start : start + batch]
        lists, depth = candidate_lists(searcher, plan, [queries[q] for q in part], k=k)
        for query_id, (dense, sparse) in zip(part, lists, strict=True):
            for key, fusion in fusions.items():
                found = dedupe_by_document(fuse(dense, sparse, fusion, limit=2 * depth, depth=depth), k)
                runs[key][query_id] = {r.external_id: float(len(found) - n) for n, r in enumerate(found)}
    return {key: evaluate_run(run, dict(qrels))["ndcg@10"] for key, run in runs.items()}
