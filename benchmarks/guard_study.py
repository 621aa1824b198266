"""Which label-free evidence tells a worse trained model from a better one? Measured against the true nDCG@10.

Run after ``benchmarks/promptagator.py`` on the same ``--home``: every trained model of that run is compared with
the base model on several kinds of evidence Ferret has without test labels, and each signal's difference is printed
beside the true difference in nDCG@10 (dense) from the benchmark's JSON. A good guard signal has the sign of the
true difference for every model.

Usage:
    python benchmarks/guard_study.py --home /work/phome/scifact --results benchmarks/out/promptagator-scifact.json \
        [--task few-shot] [--json benchmarks/out/guard-study-scifact.json]

Signals, each as MRR@10 of the labelled document among the same sub-corpus (labelled documents plus 2,000 random
distractors), candidate minus base, with a paired-bootstrap 5th percentile:
- ``held-all``: every generated query of the held-out documents (documents no model trained on);
- ``held-clean``: those that pass the length and copy filters;
- ``held-bm25``: clean ones whose document BM25 ranks in its top 10 (an independent retriever agrees);
- ``examples``: the task's few real examples;
- ``bm25-top1``: clean held-out queries labelled with BM25's first document instead of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

Labelled = list[tuple[str, int]]


def ranks_of(query_vectors: np.ndarray, labels: list[int], matrix: np.ndarray, position: dict[int, int]) -> np.ndarray:
    if not labels:
        return np.zeros(0)
    scores = query_vectors @ matrix.T
    gold = scores[np.arange(len(labels)), [position[d] for d in labels]]
    return (scores > gold[:, None]).sum(axis=1) + 1


def reciprocal(ranks: np.ndarray) -> np.ndarray:
    return np.where(ranks <= 10, 1.0 / np.maximum(ranks, 1), 0.0)


def bootstrap_low(differences: np.ndarray, seed: int = 13, rounds: int = 2_000) -> float:
    """5th percentile of the mean paired difference over bootstrap resamples of the queries."""
    if len(differences) == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, len(differences), size=(rounds, len(differences)))
    return float(np.percentile(differences[samples].mean(axis=1), 5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True, help="JSON written by benchmarks/promptagator.py")
    parser.add_argument("--task", default="few-shot")
    parser.add_argument("--held-out-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--distractors", type=int, default=2_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ["FERRET_HOME"] = str(args.home)
    from rich.console import Console
    from rich.table import Table

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.models import QueryStatus
    from ferret.core.db.synthetic import document_texts, latest_run, run_queries
    from ferret.core.db.task import find_task
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.synth.retrievers import BM25Retriever
    from ferret.core.training.guard_evidence import guard_evidence, is_held_out
    from ferret.runtime.context import app_context

    console = Console(width=160)
    results = json.loads(args.results.read_text())
    true_ndcg = {row["model"]: row["metrics"]["ndcg@10"] for row in results["evaluation"] if row.get("mode") == "dense"}
    true_hybrid = {
        row["model"]: row["metrics"]["ndcg@10"] for row in results["evaluation"] if row.get("mode") == "hybrid"
    }
    with app_context() as ctx:
        task = find_task(ctx.session, args.task)
        assert task is not None, f"no task {args.task!r} in {args.home}"
        run = latest_run(ctx.session, task)
        assert run is not None
        raw = document_texts(ctx.session, task.corpus)
        texts = {doc_id: passage_text(title, body) for doc_id, (title, body) in raw.items()}
        generated = run_queries(ctx.session, run, [QueryStatus.OK, QueryStatus.DROPPED])
        held_all: Labelled = [
            (q.text, q.document_id) for q in generated if is_held_out(q.document_id, args.held_out_fraction, args.seed)
        ]
        # The guard's own evidence (the clean held-out queries and the examples), as the pipeline builds it.
        evidence = guard_evidence(ctx.session, task, run, held_out_fraction=args.held_out_fraction, seed=args.seed)
        held_clean = [(q.text, q.document_id) for q in evidence.held_out]
        examples = [(q.text, q.document_id) for q in evidence.examples]
        bm25 = BM25Retriever(raw, depth=10)
        bm25_ranked = bm25([text for text, _ in held_clean])
        held_bm25 = [pair for pair, ranked in zip(held_clean, bm25_ranked, strict=True) if pair[1] in ranked]
        bm25_top1 = [(text, ranked[0]) for (text, _), ranked in zip(held_clean, bm25_ranked, strict=True) if ranked]
        signals = {
            "held-all": held_all,
            "held-clean": held_clean,
            "held-bm25": held_bm25,
            "examples": examples,
            "bm25-top1": bm25_top1,
        }
        labelled = {doc for pairs in signals.values() for _, doc in pairs}
        others = sorted(set(texts) - labelled)
        chosen = random.Random(args.seed).sample(others, min(args.distractors, len(others)))
        doc_ids = sorted(labelled | set(chosen))
        position = {doc: i for i, doc in enumerate(doc_ids)}
        console.print(
            f"{args.home.name}: run {run.id}, {len(generated)} generated queries; "
            + ", ".join(f"{name} {len(pairs)}" for name, pairs in signals.items())
            + f"; sub-corpus {len(doc_ids)} documents"
        )
        registry = ModelRegistry(ctx.session, ctx.settings)
        models = ["base", *[m for m in true_ndcg if m != "base"]]
        per_query: dict[str, dict[str, np.ndarray]] = {}
        for name in models:
            encoder = registry.encoder(registry.get(name))
            matrix = encoder.encode_passages([texts[d] for d in doc_ids])
            per_query[name] = {
                signal: reciprocal(
                    ranks_of(encoder.encode_queries([t for t, _ in pairs]), [d for _, d in pairs], matrix, position)
                )
                if pairs
                else np.zeros(0)
                for signal, pairs in signals.items()
            }
    table = Table(title=f"Guard signals on {args.home.name}: candidate − base MRR@10 (5th pct of paired bootstrap)")
    for column in ("model", "nDCG dense", "Δ true dense", "Δ true hybrid", *signals):
        table.add_column(column)
    report: list[dict[str, Any]] = []
    base = per_query["base"]
    table.add_row(
        "base",
        f"{true_ndcg['base']:.1f}",
        "",
        "",
        *[f"{base[s].mean():.3f}" for s in signals],
    )
    for name in models[1:]:
        row: dict[str, Any] = {
            "model": name,
            "delta_true_dense": true_ndcg[name] - true_ndcg["base"],
            "delta_true_hybrid": true_hybrid.get(name, float("nan")) - true_hybrid.get("base", float("nan")),
        }
        cells = []
        for signal in signals:
            differences = per_query[name][signal] - base[signal]
            mean, low = (float(differences.mean()), bootstrap_low(differences)) if len(differences) else (0.0, 0.0)
            row[signal] = {"mean": mean, "low": low, "n": len(differences)}
            cells.append(f"{mean:+.3f} ({low:+.3f})")
        report.append(row)
        table.add_row(
            name,
            f"{true_ndcg[name]:.1f}",
            f"{row['delta_true_dense']:+.1f}",
            f"{row['delta_true_hybrid']:+.1f}",
            *cells,
        )
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"home": str(args.home), "rows": report}, indent=2))


if __name__ == "__main__":
    main()
