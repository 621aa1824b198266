"""Quality of the base retriever: bm25s beside the base model's dense, sparse and hybrid modes, one run.

Usage:
    python benchmarks/quality.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        [--split test] [--home /tmp/ferret-bench] [--json benchmarks/out/quality.json]

Each dataset is ingested into a fresh corpus under --home (default: a temporary folder), indexed with the base
model in the embedded backend, and evaluated with ``ferret.core.eval.evaluate.evaluate_dataset`` — the same code
as ``ferret eval``. Targets (issue 2): bm25s and dense within 1.0 of EVALUATION.md's reference, hybrid at least
70.5 (SciFact) / 33.5 (NFCorpus).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REFERENCE = {  # EVALUATION.md, nDCG@10 on the test split
    "scifact": {"bm25s": 68.6, "dense": 64.5, "hybrid_floor": 70.5},
    "nfcorpus": {"bm25s": 32.3, "dense": 31.7, "hybrid_floor": 33.5},
}


def raw_reference(dataset: Path, split: str) -> dict[str, float]:
    """EVALUATION.md's reference setting, outside Ferret: MiniLM truncating title + text at 256 tokens, exact
    dot-product search over whole documents. Tells chunking/MaxP effects apart from bugs in the platform path."""
    import numpy as np

    from ferret.core.encoder.dual_encoder import DualEncoder
    from ferret.core.encoder.registry import base_model_path
    from ferret.core.eval.beir import iter_corpus, load_qrels, load_queries
    from ferret.core.eval.metrics import evaluate_run

    encoder = DualEncoder.load(base_model_path())  # max_seq_length 256, as shipped
    docs = list(iter_corpus(dataset))
    doc_vectors = encoder.encode([f"{d.title} {d.text}".strip() for d in docs], batch_size=64)
    queries, qrels = load_queries(dataset), load_qrels(dataset, split)
    query_ids = [q for q in qrels if q in queries]
    scores = encoder.encode([queries[q] for q in query_ids]) @ doc_vectors.T
    run = {}
    for row, qid in enumerate(query_ids):
        top = np.argsort(-scores[row])[:101]
        run[qid] = {docs[i].doc_id: float(scores[row, i]) for i in top}
    return evaluate_run(run, qrels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, action="append", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--raw-reference", action="store_true", help="also score MiniLM truncated at 256 tokens, exact search"
    )
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-quality-"))
    os.environ["FERRET_HOME"] = str(home)
    from rich.console import Console

    from ferret.cli.render import eval_table
    from ferret.connectors.registry import build_connector
    from ferret.core.eval.evaluate import evaluate_dataset
    from ferret.runtime.context import app_context

    console = Console()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    console.print(f"machine: {platform.node()} {os.cpu_count()} cpus; commit {commit}; home {home}")
    report = []
    for dataset in args.dataset:
        started = time.perf_counter()
        with app_context() as ctx:
            rows = evaluate_dataset(
                ctx.session,
                ctx.settings,
                ctx.backend,
                dataset,
                connectors=build_connector,
                split=args.split,
                status=lambda m: console.print(f"[dim]{m}[/dim]"),
            )
        if args.raw_reference:
            from ferret.core.eval.evaluate import EvalRow

            started_raw = time.perf_counter()
            metrics = raw_reference(dataset, args.split)
            rows.append(EvalRow("raw-minilm-256", "base", "exact", metrics, time.perf_counter() - started_raw, 0))
        wall = time.perf_counter() - started
        console.print(eval_table(f"{dataset.name} ({args.split}), {wall:.0f} s in all", rows))
        reference = REFERENCE.get(dataset.name)
        if reference:
            by_name = {(r.mode or r.system): r.metrics["ndcg@10"] for r in rows}
            checks = [
                ("bm25s within 1.0 of reference", abs(by_name["bm25s"] - reference["bm25s"]) <= 1.0),
                ("dense within 1.0 of reference", abs(by_name["dense"] - reference["dense"]) <= 1.0),
                (f"hybrid >= {reference['hybrid_floor']}", by_name["hybrid"] >= reference["hybrid_floor"]),
            ]
            for label, ok in checks:
                console.print(f"  {'PASS' if ok else 'FAIL'}  {label}")
        report.append({"dataset": dataset.name, "wall_s": wall, "rows": [r.as_dict() for r in rows]})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
