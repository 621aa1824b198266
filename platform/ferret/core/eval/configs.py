"""Score search configurations side by side on a BEIR-layout dataset (the quickstart's closing table)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ferret.core.eval.beir import load_qrels, load_queries
from ferret.core.eval.metrics import evaluate_run
from ferret.core.index.types import SearchMode
from ferret.core.search.configuration import SearchPlan
from ferret.core.search.searcher import Searcher


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
