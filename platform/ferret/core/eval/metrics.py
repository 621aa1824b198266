"""nDCG@k, Recall@k and MRR@k as BEIR computes them (trec_eval semantics, linear gain, log2 discount).

``run`` maps a query id to ``{doc_id: score}``; ``qrels`` maps a query id to ``{doc_id: relevance}``. Queries
without a relevant document are not counted, and a query's own id is removed from its ranking (BEIR's
``ignore_identical_ids``), which matters for corpora that contain the queries (ArguAna, Quora).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


def _ranking(query_id: str, scores: Mapping[str, float]) -> list[str]:
    # Ties broken by doc id, descending, like trec_eval, so results do not depend on dict order.
    ranked = sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
    return [doc_id for doc_id, _ in ranked if doc_id != query_id]


def ndcg_at_k(ranking: list[str], relevant: Mapping[str, int], k: int) -> float:
    dcg = sum(relevant.get(doc_id, 0) / math.log2(rank + 2) for rank, doc_id in enumerate(ranking[:k]))
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(rank + 2) for rank, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: list[str], relevant: Mapping[str, int], k: int) -> float:
    positives = {doc_id for doc_id, r in relevant.items() if r > 0}
    return len(positives.intersection(ranking[:k])) / len(positives) if positives else 0.0


def mrr_at_k(ranking: list[str], relevant: Mapping[str, int], k: int) -> float:
    for rank, doc_id in enumerate(ranking[:k]):
        if relevant.get(doc_id, 0) > 0:
            return 1.0 / (rank + 1)
    return 0.0


def evaluate_run(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, Recall@100 and MRR@10 (in percent) over queries that have a relevant document."""
    totals = {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    counted = 0
    for query_id, relevant in qrels.items():
        if not any(r > 0 for r in relevant.values()):
            continue
        counted += 1
        ranking = _ranking(query_id, run.get(query_id, {}))
        totals["ndcg@10"] += ndcg_at_k(ranking, relevant, 10)
        totals["recall@100"] += recall_at_k(ranking, relevant, 100)
        totals["mrr@10"] += mrr_at_k(ranking, relevant, 10)
    return {name: 100.0 * value / counted if counted else 0.0 for name, value in totals.items()}
