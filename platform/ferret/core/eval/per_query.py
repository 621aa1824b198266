"""Per-query nDCG@10 of two systems on a labelled set: which queries a model wins and loses against a reference.

An average hides the trade: a trained model can gain on many queries and lose badly on a few. After
``evaluate_dataset`` has ingested and indexed the set, this scores each query for BM25 (bm25s, as in the table)
and for each model version, with the same BEIR nDCG@10 (metrics.ndcg_at_k).

Example:
    >>> scores = per_query_ndcg(session, settings, backend, dataset, models=["base", "kb-job3"], corpus_name="beir-x")
    >>> wins_and_losses(scores["kb-job3"], scores["base"])[:2]
    [QueryDelta(query_id='7', ...), ...]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import plain_index_versions
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError
from ferret.core.eval.beir import load_qrels, load_queries
from ferret.core.eval.evaluate import judged_documents
from ferret.core.eval.metrics import ndcg_at_k
from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import SearchMode
from ferret.core.search.bm25_ranker import BM25Ranker
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings

BM25 = "bm25s"


@dataclass(frozen=True)
class QueryDelta:
    query_id: str
    query: str
    candidate: float
    reference: float

    @property
    def delta(self) -> float:
        return self.candidate - self.reference


def per_query_ndcg(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    dataset: Path,
    *,
    models: Sequence[str],
    corpus_name: str,
    split: str = "test",
    mode: SearchMode = "dense",
) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """(query id → text, system → query id → nDCG@10) for BM25 and each model, on an indexed corpus."""
    queries = load_queries(dataset)
    qrels = load_qrels(dataset, split)
    query_ids = [qid for qid in qrels if qid in queries]
    texts = [queries[qid] for qid in query_ids]
    documents, _ = judged_documents(session, dataset, corpus_name, qrels, split)
    scores: dict[str, dict[str, float]] = {}
    bm25_runs = BM25Ranker(documents).search(texts, k=100)
    scores[BM25] = {
        qid: ndcg_at_k(sorted(run, key=lambda d: -run[d]), qrels[qid], 10)
        for qid, run in zip(query_ids, bm25_runs, strict=True)
    }
    corpus = get_corpus(session, corpus_name)
    registry = ModelRegistry(session, settings)
    searcher = Searcher.over(session, settings, backend)
    for name in models:
        model = registry.get(name)
        index_version = next(iter(plain_index_versions(session, corpus, model)), None)
        if index_version is None:
            raise ConflictError(f"Corpus {corpus_name!r} has no index built with model {name!r}; evaluate it first.")
        results = searcher.search_many(corpus_name, texts, k=10, mode=mode, index_version=index_version)
        scores[name] = {
            qid: ndcg_at_k([r.external_id for r in hits], qrels[qid], 10)
            for qid, hits in zip(query_ids, results, strict=True)
        }
    return dict(zip(query_ids, texts, strict=True)), scores


def wins_and_losses(
    queries: Mapping[str, str], candidate: Mapping[str, float], reference: Mapping[str, float]
) -> list[QueryDelta]:
    """Every query where the two differ, biggest win first, biggest loss last."""
    deltas = [
        QueryDelta(qid, queries[qid], candidate[qid], reference[qid])
        for qid in candidate
        if qid in reference and candidate[qid] != reference[qid]
    ]
    return sorted(deltas, key=lambda d: (-d.delta, d.query_id))
