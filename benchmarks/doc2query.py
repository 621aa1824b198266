"""Document expansion with the kept synthetic queries (doc2query--), and what each filter choice does to it.

Usage:
    python benchmarks/doc2query.py --dataset ../shared/datasets/scifact --home DIR [--task few-shot-ex250] \
        [--round-trip-k 10] [--quantiles 0.25,0.5] [--as-filtered] [--json OUT]

The home is one where ``benchmarks/search_configs.py`` ran (ingested corpus, base index, a generation run of the
task); the run's queries need ``logprob`` (generated after revision 0019, or scored by
``benchmarks/query_logprobs.py``) for the log-probability rows. For each filter setting, the surviving queries of a
document are appended to its text (doc2query--, Gospodinov et al. 2023: expansion only with filtered queries) and
BM25 (bm25s, the project's BM25 baseline) is rebuilt over the expanded corpus. Rows on the test split: nDCG@10,
Recall@100, MRR@10 of BM25 alone and of RRF (k=60, document level) of BM25 with the base dense ranking read from
the base index, unexpanded first. Label-free figures: each filter's keep rate, and how often queries pass the round
trip by log-probability quartile (does the generator's own score agree with the round trip?).

Filter settings are applied to the run and rolled back at the end: the home is left as it was. ``--as-filtered``
re-filters nothing: it expands with the queries the run's last filter stage kept (as a pipeline left them), which is
what a large run needs (its round trip takes longer than the expansion).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def rrf(rankings: list[dict[str, float]], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack et al. 2009) of score dictionaries, each ranked by its own scores."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(sorted(ranking, key=lambda d: -ranking[d]), 1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)
    return fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--task", default="few-shot-ex250")
    parser.add_argument("--round-trip-k", type=int, default=10)
    parser.add_argument("--quantiles", default="0.25,0.5")
    parser.add_argument("--as-filtered", action="store_true", help="expand with the queries the run keeps now")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ["FERRET_HOME"] = str(args.home)

    from rich.console import Console
    from rich.table import Table

    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.models import QueryStatus
    from ferret.core.db.synthetic import document_texts, latest_run, run_queries
    from ferret.core.db.task import get_task
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.evaluate import corpus_name_for, ensure_index
    from ferret.core.eval.metrics import evaluate_run
    from ferret.core.search.bm25_ranker import BM25Ranker
    from ferret.core.search.configuration import base_plan
    from ferret.core.synth.filters import FilterConfig, apply_filters, length_bounds
    from ferret.core.synth.retrievers import SearcherRetriever
    from ferret.runtime.context import app_context

    console = Console(width=160)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    query_ids = [q for q in qrels if q in queries]
    texts = [queries[q] for q in query_ids]
    report: dict[str, Any] = {"dataset": args.dataset.name, "commit": commit, "filters": {}, "rows": []}
    with app_context() as ctx:
        session = ctx.session
        corpus_name = corpus_name_for(args.dataset)
        corpus = get_corpus(session, corpus_name)
        task = get_task(session, args.task)
        run = latest_run(session, task)
        assert run is not None, "the task has no generation run"
        registry = ModelRegistry(session, ctx.settings)
        base_index = ensure_index(session, ctx.settings, ctx.backend, corpus, registry.ensure_base(), console.print)
        base = base_plan(session, corpus)
        documents = document_texts(session, corpus)
        external = {document_id: doc.external_id for document_id, doc in _documents(session, corpus).items()}
        started = time.perf_counter()
        dense_hits = ctx.searcher.search_many(corpus_name, texts, k=100, mode="dense", plan=base)
        dense = [_first_scores([h.external_id for h in hits]) for hits in dense_hits]
        console.print(f"dense rankings of {len(texts)} queries in {time.perf_counter() - started:.0f} s")

        bounds = length_bounds(task)
        basic: dict[str, Any] = {"min_words": bounds.get("min_words", 3), "max_words": bounds.get("max_words", 40)}
        round_trip = SearcherRetriever(
            ctx.searcher, corpus_name, mode="dense", depth=args.round_trip_k, index_version=base_index
        )
        quantiles = [float(q) for q in args.quantiles.split(",") if q]
        settings: dict[str, FilterConfig] = {
            "clean (length, copies, duplicates)": FilterConfig(**basic),
            f"+ round trip base K={args.round_trip_k} (the pipeline's default)": FilterConfig(
                round_trip=round_trip, round_trip_k=args.round_trip_k, **basic
            ),
        }
        for q in quantiles:
            settings[f"+ log-probability ≥ q{q:g}"] = FilterConfig(logprob_quantile=q, **basic)
            settings[f"+ log-probability ≥ q{q:g} + round trip"] = FilterConfig(
                logprob_quantile=q, round_trip=round_trip, round_trip_k=args.round_trip_k, **basic
            )

        def score(name: str, expansions: dict[int, list[str]], filters: dict[str, Any] | None) -> None:
            corpus_texts = {
                external[d]: (title, " ".join([body, *expansions.get(d, [])])) for d, (title, body) in documents.items()
            }
            started = time.perf_counter()
            bm25 = BM25Ranker(corpus_texts).search(texts, k=100)
            fused = [rrf([b, d]) for b, d in zip(bm25, dense, strict=True)]
            row: dict[str, Any] = {"name": name, "expanded_documents": len(expansions)}
            row["expansion_queries"] = sum(len(v) for v in expansions.values())
            for label, ranking in (("bm25", bm25), ("rrf", fused)):
                metrics = evaluate_run(dict(zip(query_ids, ranking, strict=True)), qrels)
                row[label] = {m: round(v, 2) for m, v in metrics.items()}
            if filters is not None:
                row["filters"] = filters
            report["rows"].append(row)
            console.print(
                f"{name}: {row['expansion_queries']} queries on {row['expanded_documents']} documents; "
                f"bm25 {row['bm25']['ndcg@10']:.1f}, rrf {row['rrf']['ndcg@10']:.1f} "
                f"({time.perf_counter() - started:.0f} s)"
            )

        score("no expansion", {}, None)
        if args.as_filtered:  # the queries as the pipeline left them; no filter setting is applied
            score(
                "the run's kept queries, as filtered", _by_document(run_queries(session, run, [QueryStatus.OK])), None
            )
            settings = {}
        trips: dict[int, bool] = {}
        logprob_of: dict[int, float | None] = {}
        for name, config in settings.items():
            result = apply_filters(session, run, config)
            expansions = _by_document(run_queries(session, run, [QueryStatus.OK]))
            if config.round_trip is not None and config.logprob_quantile is None:
                for query in run_queries(session, run):
                    if query.status is QueryStatus.OK or (query.reason or "").startswith("round-trip"):
                        trips[query.id] = query.status is QueryStatus.OK
                logprob_of = {q.id: q.logprob for q in run_queries(session, run)}
            score(name, expansions, result.as_dict())
        session.rollback()

        # Does the generator's own score agree with the round trip? Pass rate by log-probability quartile.
        known = sorted((logprob_of[i], passed) for i, passed in trips.items() if logprob_of.get(i) is not None)
        quartiles = []
        for part in range(4):
            chunk = known[part * len(known) // 4 : (part + 1) * len(known) // 4]
            if chunk:
                quartiles.append(
                    {"quartile": part + 1, "queries": len(chunk), "logprob_range": [chunk[0][0], chunk[-1][0]],
                     "round_trip_pass_rate": round(sum(p for _, p in chunk) / len(chunk), 3)}
                )  # fmt: skip
        report["round_trip_by_logprob_quartile"] = quartiles

    for quartile in quartiles:
        console.print(quartile)
    table = Table(title=f"doc2query-- on {args.dataset.name} ({args.split}, {len(query_ids)} queries), commit {commit}")
    for column in (
        "expansion",
        "queries kept",
        "docs expanded",
        "BM25 nDCG@10",
        "BM25 R@100",
        "RRF nDCG@10",
        "RRF R@100",
    ):
        table.add_column(column)
    for row in report["rows"]:
        table.add_row(
            row["name"], str(row["expansion_queries"]), str(row["expanded_documents"]),
            f"{row['bm25']['ndcg@10']:.1f}", f"{row['bm25']['recall@100']:.1f}",
            f"{row['rrf']['ndcg@10']:.1f}", f"{row['rrf']['recall@100']:.1f}",
        )  # fmt: skip
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))


def _by_document(queries: Any) -> dict[int, list[str]]:
    """The texts of ``queries`` per document id: what is appended to each document."""
    expansions: dict[int, list[str]] = {}
    for query in queries:
        expansions.setdefault(query.document_id, []).append(query.text)
    return expansions


def _first_scores(ranked: list[str]) -> dict[str, float]:
    """A descending score per document, its first (best) place kept."""
    scores: dict[str, float] = {}
    for rank, doc in enumerate(ranked):
        scores.setdefault(doc, float(len(ranked) - rank))
    return scores


def _documents(session: Any, corpus: Any) -> dict[int, Any]:
    from sqlalchemy import select

    from ferret.core.db.models import Document

    return {d.id: d for d in session.scalars(select(Document).where(Document.corpus_id == corpus.id))}


if __name__ == "__main__":
    main()
