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

What ONNX Runtime and int8 cost (issue 12 item 3), on first-stage candidates saved by ``rerank_gpu.py prep``:
    python benchmarks/rerank_eval.py rescore --candidates candidates-scifact.json.gz --docs docs-scifact.json.gz \
        --reranker DIR --runtime onnx-int8 --cache OUT-onnx-int8.jsonl [--depth 10] [--threads 2] [--limit-s 480]
    python benchmarks/rerank_eval.py compare --dataset ../shared/datasets/scifact --depth 10 \
        --caches torch=OUT-torch.jsonl,onnx=OUT-onnx.jsonl,onnx-int8=OUT-onnx-int8.jsonl,gpu-fp16=cache.jsonl:cross128

``rescore`` scores each query's top ``--depth`` candidates with the reranker as search serves it for
``FERRET_RERANKER_RUNTIME=--runtime`` (``rerank.cross_encoder.load_reranker``, ``MAX_PAIR_TOKENS``; the export
goes to ``--onnx-cache``), resumable like ``score``, and prints the p50 time per query. ``compare`` prints nDCG@10
of each cache's scores fused at ``--weights`` (the first cache is the reference) and how far each is from the
reference's scores: the largest absolute difference, the mean Spearman ρ per query and how often the top document
is the same. ``NAME=PATH:FIELD`` reads another field of a cache's rows (``rerank_gpu.py``'s ``cross128``).
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


def rescore(args: argparse.Namespace) -> None:
    import gzip
    import statistics
    import tempfile

    from ferret.core.rerank.cross_encoder import load_reranker, prepare_reranker
    from ferret.core.settings import FerretSettings

    with gzip.open(args.candidates, "rt") as handle:
        candidates = json.load(handle)
    with gzip.open(args.docs, "rt") as handle:
        docs = json.load(handle)
    done = {json.loads(line)["qid"] for line in args.cache.read_text().splitlines()} if args.cache.exists() else set()
    todo = [c for c in candidates if c["qid"] not in done]
    home = Path(tempfile.mkdtemp(prefix="rerank-eval-"))
    settings = FerretSettings(
        home=home, onnx_cache=args.onnx_cache or home / "onnx", reranker_runtime=args.runtime,
        reranker_threads=args.threads,
    )  # fmt: skip
    if args.runtime == "torch":
        import torch

        torch.set_num_threads(args.threads)
    prepare_reranker(args.reranker, settings)  # as training does: the export is there before the first search
    reranker = load_reranker(args.reranker, name="reranker", settings=settings)
    if reranker.runtime != args.runtime:
        raise SystemExit(f"asked for {args.runtime}, served by {reranker.runtime}: see the log line above")
    print(f"{args.runtime}: served by {type(reranker).__name__}, load {os.getloadavg()}", flush=True)
    started, times = time.perf_counter(), []
    with args.cache.open("a") as out:
        for row in todo:
            ids = row["ids"]
            at = time.perf_counter()
            cross = reranker.score(row["query"], [docs[i] for i in ids[: args.depth]])
            times.append(1000 * (time.perf_counter() - at))
            line = {"qid": row["qid"], "ids": ids, "first": row["first"], "cross": [float(c) for c in cross]}
            out.write(json.dumps(line) + "\n")
            out.flush()
            if time.perf_counter() - started > args.limit_s:
                break
    total = len(done) + len(times)
    p50 = statistics.median(times) if times else 0.0
    print(f"{args.runtime}: scored {len(times)} queries in {time.perf_counter() - started:.0f} s ({total} of "
          f"{len(candidates)}), p50 {p50:.0f} ms per query, load {os.getloadavg()}")  # fmt: skip


def _fused_run(rows: list[dict[str, Any]], depth: int, weight: float, field: str) -> dict[str, dict[str, float]]:
    """Each query's ranking as search makes it: the top ``depth`` by fused score, the rest in first-stage order."""
    import numpy as np

    from ferret.core.rerank.cross_encoder import fused_scores

    run = {}
    for r in rows:
        ids, head = r["ids"], min(depth, len(r[field]))
        fused = fused_scores(np.array(r["first"][:head]), np.array(r[field][:head]), weight)
        order = sorted(range(head), key=lambda i: (-fused[i], i)) + list(range(head, len(ids)))
        run[r["qid"]] = {ids[i]: float(len(ids) - rank) for rank, i in enumerate(order)}
    return run


def compare(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from ferret.core.eval.beir import load_qrels
    from ferret.core.eval.metrics import evaluate_run

    caches: dict[str, tuple[dict[str, dict[str, Any]], str]] = {}
    for item in args.caches.split(","):
        name, _, location = item.partition("=")
        path, _, field = location.partition(":")
        lines = Path(path).read_text().splitlines()
        caches[name] = ({r["qid"]: r for r in map(json.loads, filter(str.strip, lines))}, field or "cross")
    qids = sorted(set.intersection(*(set(rows) for rows, _ in caches.values())))
    all_qrels = load_qrels(args.dataset, args.split)
    qrels = {q: all_qrels[q] for q in qids if q in all_qrels}
    weights = [float(w) for w in args.weights.split(",")]
    (reference_rows, reference_field), *_ = caches.values()
    print(f"{len(qrels)} queries, depth {args.depth}; nDCG@10 by reranker weight; agreement with "
          f"{next(iter(caches))}'s scores")  # fmt: skip
    print(f"{'runtime':10s} " + " ".join(f"w={w:<5.2f}" for w in weights) + "   max |Δ|  Spearman  top-1 same")
    table: dict[str, Any] = {"queries": len(qrels), "depth": args.depth, "rows": []}
    for name, (by_qid, field) in caches.items():
        rows = [by_qid[q] for q in qids if q in qrels]
        ndcg = [evaluate_run(_fused_run(rows, args.depth, w, field), qrels)["ndcg@10"] for w in weights]
        gaps, rhos, same = [], [], []
        for q in qrels:
            a = np.array(reference_rows[q][reference_field][: args.depth])
            b = np.array(by_qid[q][field][: args.depth])
            gaps.append(float(np.abs(a - b).max()))
            same.append(float(a.argmax() == b.argmax()))
            rank_a, rank_b = np.argsort(np.argsort(-a)), np.argsort(np.argsort(-b))
            rhos.append(float(np.corrcoef(rank_a, rank_b)[0, 1]))
        row = {"runtime": name, "ndcg@10": dict(zip(map(str, weights), ndcg, strict=True)), "max_abs_diff": max(gaps),
               "spearman": float(np.mean(rhos)), "top1_same": float(np.mean(same))}  # fmt: skip
        table["rows"].append(row)
        print(f"{name:10s} " + " ".join(f"{v:7.2f}" for v in ndcg)
              + f"   {row['max_abs_diff']:7.1e}  {row['spearman']:8.4f}  {row['top1_same']:10.3f}")  # fmt: skip
    return table


def report(args: argparse.Namespace) -> dict[str, Any]:
    from ferret.core.eval.beir import load_qrels
    from ferret.core.eval.metrics import evaluate_run

    rows = [json.loads(line) for line in args.cache.read_text().splitlines() if line.strip()]
    all_qrels = load_qrels(args.dataset, args.split)
    qrels = {r["qid"]: all_qrels[r["qid"]] for r in rows}
    table: dict[str, Any] = {"queries": len(rows), "rows": []}
    for depth in (int(d) for d in args.depths.split(",")):
        for weight in WEIGHTS:
            run = _fused_run(rows, depth, weight, "cross")
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
    parser.add_argument("step", choices=("score", "report", "rescore", "compare"))
    parser.add_argument("--dataset", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--candidates", type=Path)
    parser.add_argument("--docs", type=Path)
    parser.add_argument("--runtime", choices=("torch", "onnx", "onnx-int8"), default="onnx-int8")
    parser.add_argument("--onnx-cache", type=Path, default=None)
    parser.add_argument("--caches", default="")
    parser.add_argument("--weights", default="0,0.25,0.5,1.0")
    parser.add_argument("--home", type=Path)
    parser.add_argument("--reranker", type=Path)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--depths", default="10,20")
    parser.add_argument("--limit-s", type=float, default=480.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.step == "rescore":
        if args.candidates is None or args.docs is None or args.reranker is None or args.cache is None:
            parser.error("rescore needs --candidates, --docs, --reranker and --cache")
        rescore(args)
        return
    if args.dataset is None:
        parser.error(f"{args.step} needs --dataset")
    if args.step == "compare":
        if not args.caches:
            parser.error("compare needs --caches NAME=PATH[:FIELD],...")
        table = compare(args)
    elif args.cache is None:
        parser.error(f"{args.step} needs --cache")
    elif args.step == "score":
        if args.home is None or args.reranker is None:
            parser.error("score needs --home and --reranker")
        score(args)
        return
    else:
        table = report(args)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
