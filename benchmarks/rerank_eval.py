"""The trained reranker on a BEIR test split, resumable, for machines too slow to rerank the whole split in one go.

Usage:
    python benchmarks/rerank_eval.py score --dataset ../shared/datasets/scifact --home H --reranker DIR \
        --cache OUT.jsonl [--alpha 0.6] [--depth 20] [--limit-s 480]
    python benchmarks/rerank_eval.py report --dataset ../shared/datasets/scifact --cache OUT.jsonl [--depths 10,20]

``score`` runs the first stage of a ``benchmarks/search_configs.py`` home (the base index; RRF, or the convex
fusion with ``--alpha``, the weight that run tuned and printed) for the split's queries in file order, scores its
top ``--depth`` documents with the reranker (Ferret's ``Reranker``: fp32, ``MAX_PAIR_TOKENS``) and appends one line
per query to the cache; it stops after ``--limit-s`` seconds and a rerun continues where it stopped. ``report``
fuses the cached scores exactly as search does (``rerank.cross_encoder.fused_scores``: min-max of each, weighted)
for the weights the tuner tries and the depths asked, on the queries scored so far, and prints nDCG@10, MRR@10 and
Recall@100 with the number of queries, so a partial run says how partial it is.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def score(args: argparse.Namespace) -> None:
    os.environ["FERRET_HOME"] = str(args.home)
    import torch

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.corpus import get_corpus
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.evaluate import corpus_name_for
    from ferret.core.rerank.cross_encoder import Reranker
    from ferret.core.search.configuration import SearchPlan, base_plan
    from ferret.core.search.fusion import Fusion
    from ferret.runtime.context import app_context

    torch.set_num_threads(args.threads)
    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    done = {json.loads(line)["qid"] for line in args.cache.read_text().splitlines()} if args.cache.exists() else set()
    todo = [q for q in qrels if q in queries and q not in done]
    reranker = Reranker(args.reranker, name="reranker")
    started, scored = time.perf_counter(), 0
    with app_context() as ctx, args.cache.open("a") as out:
        corpus = get_corpus(ctx.session, corpus_name_for(args.dataset))
        base = base_plan(ctx.session, corpus)
        fusion = Fusion("convex", args.alpha, "tmm") if args.alpha is not None else base.fusion
        plan = SearchPlan(base.collection, base.model_path, fusion, label="first stage")
        for start in range(0, len(todo), 8):
            part = todo[start : start + 8]
            found = ctx.searcher.search_many(corpus.name, [queries[q] for q in part], k=100, mode="hybrid", plan=plan)
            for qid, results in zip(part, found, strict=True):
                head = results[: args.depth]
                cross = reranker.score(queries[qid], [passage_text(r.title, r.text) for r in head])
                row = {
                    "qid": qid, "ids": [r.external_id for r in results], "first": [r.score for r in results],
                    "cross": [round(float(c), 6) for c in cross],
                }  # fmt: skip
                out.write(json.dumps(row) + "\n")
                out.flush()
                scored += 1
            if time.perf_counter() - started > args.limit_s:
                break
    total = len(done) + scored
    print(f"scored {scored} queries in {time.perf_counter() - started:.0f} s; {total} of {total + len(todo) - scored}")


def report(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from ferret.core.eval.beir import load_qrels
    from ferret.core.eval.metrics import evaluate_run
    from ferret.core.rerank.cross_encoder import fused_scores

    rows = [json.loads(line) for line in args.cache.read_text().splitlines() if line.strip()]
    all_qrels = load_qrels(args.dataset, args.split)
    qrels = {r["qid"]: all_qrels[r["qid"]] for r in rows}
    table: dict[str, Any] = {"queries": len(rows), "rows": []}
    for depth in (int(d) for d in args.depths.split(",")):
        for weight in WEIGHTS:
            run = {}
            for r in rows:
                ids, head = r["ids"], min(depth, len(r["cross"]))
                fused = fused_scores(np.array(r["first"][:head]), np.array(r["cross"][:head]), weight)
                order = sorted(range(head), key=lambda i: (-fused[i], i)) + list(range(head, len(ids)))
                run[r["qid"]] = {ids[i]: float(len(ids) - rank) for rank, i in enumerate(order)}
            metrics = {m: round(v, 2) for m, v in evaluate_run(run, qrels).items()}
            row = {"depth": depth, "weight": weight, **metrics}
            table["rows"].append(row)
            print(
                f"depth {depth:3d}  reranker weight {weight:.2f}  nDCG@10 {metrics['ndcg@10']:5.1f}  "
                f"MRR@10 {metrics['mrr@10']:5.1f}  R@100 {metrics['recall@100']:5.1f}  ({len(rows)} queries)"
            )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("score", "report"))
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--reranker", type=Path)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--depths", default="10,20")
    parser.add_argument("--limit-s", type=float, default=480.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.step == "score":
        if args.home is None or args.reranker is None:
            parser.error("score needs --home and --reranker")
        score(args)
        return
    table = report(args)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
