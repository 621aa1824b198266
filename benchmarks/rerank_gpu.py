"""Train the reranker, score the test splits and distil into the dual encoder on a GPU machine, judge here.

Usage:
    python benchmarks/rerank_gpu.py prep --scifact ../shared/datasets/scifact --scifact-home H1 [--alpha 0.6] --out DATA
    python benchmarks/rerank_gpu.py prep --nfcorpus ../shared/datasets/nfcorpus --nfcorpus-home H2 --out DATA
    python benchmarks/rerank_gpu.py device --data DATA --base BASE_MODEL_DIR --out OUT      (on the GPU machine)
    python benchmarks/rerank_gpu.py report --scifact ../shared/datasets/scifact --scifact-home H1 \
        [--nfcorpus ../shared/datasets/nfcorpus] --data DATA --results OUT [--json FILE]

``prep`` runs here, where the index is (Qdrant, BM25, the database of a ``benchmarks/search_configs.py`` home): it
mines the reranker's training groups from the kept synthetic pairs of the non-held-out documents (negatives from
ranks 3..50 of the hybrid first stage, the tuned convex fusion with ``--alpha``), the distillation groups from every
clean synthetic query (kept, or dropped by the round-trip filter only: the teacher labels them, GPL §3), and the
first stage's top 100 for each test query (and BM25's top 100 alone, for the hybrid rows of the distilled encoder).
Documents travel once, by id, gzip'd.

``device`` needs torch, sentence-transformers and Ferret's ``rerank``/``training`` modules only: it trains the
cross-encoder (``train_cross_encoder``), scores each test query's top 50 at 256 and 128 tokens, times scoring on the
GPU, labels the distillation groups with the reranker and trains the dual encoder with margin-MSE
(``train_margin_mse``), then encodes SciFact's passages and test queries with the base and the distilled encoder.

``report`` prints the reranker's nDCG@10 by depth and weight (``rerank.cross_encoder.fused_scores``, as search fuses),
and dense and hybrid nDCG@10 of base and distilled encoders from the returned vectors: dense is exact cosine over all
passages, MaxP per document; hybrid fuses those with BM25's top 100 by Ferret's own ``fuse`` (RRF and the tuned
convex combination) at the document level. The same code scores base and distilled, so their difference is the
distillation's; the base rows also check the replica against the figures of the index itself.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEPTH_SCORED = 50


def _dump(path: Path, rows: Any) -> None:
    with gzip.open(path, "wt") as handle:
        json.dump(rows, handle)


def _load(path: Path) -> Any:
    with gzip.open(path, "rt") as handle:
        return json.load(handle)


def prep_dataset(dataset: Path, home: Path, alpha: float | None, out: Path, *, groups: bool) -> None:
    os.environ["FERRET_HOME"] = str(home)
    from sqlalchemy import select

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.models import Document, Passage, QueryStatus
    from ferret.core.db.synthetic import run_queries
    from ferret.core.errors import InvalidInputError
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.evaluate import corpus_name_for
    from ferret.core.rerank.stage import mine_groups
    from ferret.core.rerank.training import RerankerTrainingConfig, check_pair_count
    from ferret.core.search.configuration import SearchPlan, base_plan
    from ferret.core.search.fusion import Fusion
    from ferret.core.training.guard_evidence import is_held_out
    from ferret.runtime.context import app_context

    name = dataset.name
    queries, qrels = load_queries(dataset), load_qrels(dataset, "test")
    qids = [q for q in qrels if q in queries]
    with app_context() as ctx:
        corpus = get_corpus(ctx.session, corpus_name_for(dataset))
        base = base_plan(ctx.session, corpus)
        fusion = Fusion("convex", alpha, "tmm") if alpha is not None else base.fusion
        plan = SearchPlan(base.collection, base.model_path, fusion, label="first stage")
        rows = ctx.session.query(Document.external_id, Document.title, Document.body).filter_by(corpus_id=corpus.id)
        docs = {external_id: passage_text(title, body) for external_id, title, body in rows}
        keys = {text: external_id for external_id, text in docs.items()}  # equal texts: any of their ids
        if groups:
            from ferret.core.db.synthetic import latest_run
            from ferret.core.db.task import find_task

            task = find_task(ctx.session, "few-shot-ex250")
            run = latest_run(ctx.session, task) if task else None
            assert run is not None, f"{home} holds no generation run"
            config = RerankerTrainingConfig()
            for label, statuses in (("kept", [QueryStatus.OK]), ("all", [QueryStatus.OK, QueryStatus.DROPPED])):
                pairs = [
                    (q.text, q.document_id)
                    for q in run_queries(ctx.session, run, statuses)
                    if not is_held_out(q.document_id, 0.1, 13)
                    and (q.status == QueryStatus.OK or (q.reason or "").startswith("round-trip"))
                ]
                try:
                    check_pair_count(len(pairs))
                except InvalidInputError as error:  # too few pairs: the refusal is the result
                    print(f"{name} {label}: {error}")
                    continue
                found = mine_groups(ctx.session, ctx.searcher, corpus, pairs, plan, config)
                table = [{"q": g.query, "p": keys[g.positive], "n": [keys[t] for t in g.negatives]} for g in found]
                _dump(out / f"groups-{label}-{name}.json.gz", table)
                print(f"{name} {label}: {len(table)} groups from {len(pairs)} pairs")
        candidates = []
        for start in range(0, len(qids), 32):
            part = qids[start : start + 32]
            texts = [queries[q] for q in part]
            hybrid = ctx.searcher.search_many(corpus.name, texts, k=100, mode="hybrid", plan=plan)
            sparse = ctx.searcher.search_many(corpus.name, texts, k=100, mode="sparse", plan=base)
            for qid, h, s in zip(part, hybrid, sparse, strict=True):
                candidates.append({
                    "qid": qid, "query": queries[qid], "ids": [r.external_id for r in h],
                    "first": [r.score for r in h], "sparse_ids": [r.external_id for r in s],
                    "sparse": [r.score for r in s],
                })  # fmt: skip
        _dump(out / f"candidates-{name}.json.gz", candidates)
        if groups:
            passages = ctx.session.execute(
                select(Document.external_id, Document.title, Passage.text)
                .join(Document, Passage.document_id == Document.id)
                .where(Passage.corpus_id == corpus.id)
                .order_by(Passage.id)
            ).all()
            _dump(out / f"passages-{name}.json.gz", [[e, passage_text(t, x)] for e, t, x in passages])
        _dump(out / f"docs-{name}.json.gz", docs)
        print(f"{name}: {len(candidates)} test queries, {len(docs)} documents")


def device(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from ferret.core.rerank.training import MIN_PAIRS, RerankerTrainingConfig, TrainingGroup, train_cross_encoder
    from ferret.core.training.distillation import DistillationConfig, teacher_scores, train_margin_mse

    out, data, where = args.out, args.data, args.device
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if where == "cuda" else where}
    smoke = args.smoke  # a CPU dry run of every step on a few rows: not a result
    cut = 8 if smoke else None
    minimum = 1 if smoke else MIN_PAIRS
    scored = 3 if smoke else DEPTH_SCORED

    def groups_of(label: str, docs: dict[str, str]) -> list[TrainingGroup]:
        rows = _load(data / f"groups-{label}-scifact.json.gz")
        return [TrainingGroup(r["q"], docs[r["p"]], [docs[n] for n in r["n"]]) for r in rows[:cut]]

    docs = _load(data / "docs-scifact.json.gz")
    kept = groups_of("kept", docs)
    reranker = Path("/tmp/reranker")
    config = RerankerTrainingConfig(**json.loads(args.ce_config))
    report["reranker"] = train_cross_encoder(kept, args.base, reranker, config, device=where, minimum_pairs=minimum)
    print("reranker", report["reranker"], flush=True)
    model = CrossEncoder(str(reranker), num_labels=1, device=where)
    if where == "cuda":
        model.model.half()
    model.model.eval()
    for name in ("scifact", "nfcorpus"):
        if not (data / f"candidates-{name}.json.gz").exists():
            continue
        texts = _load(data / f"docs-{name}.json.gz")
        rows = _load(data / f"candidates-{name}.json.gz")[: 3 if smoke else None]
        with (out / f"cache-{name}.jsonl").open("w") as handle:
            for length in (256, 128):
                model.max_length = length
                pairs = [(r["query"], texts[i]) for r in rows for i in r["ids"][:scored]]
                started = time.perf_counter()
                flat = model.predict(pairs, batch_size=256, convert_to_numpy=True, show_progress_bar=False).tolist()
                report[f"score-{name}-{length}"] = {
                    "pairs": len(pairs),
                    "seconds": round(time.perf_counter() - started, 1),
                }
                at = 0
                for r in rows:
                    width = len(r["ids"][:scored])
                    r[f"cross{length}"] = [round(x, 6) for x in flat[at : at + width]]
                    at += width
            for r in rows:
                handle.write(json.dumps({**r, "cross": r["cross256"]}) + "\n")
        print(name, report[f"score-{name}-256"], flush=True)
    latency: list[dict[str, Any]] = []
    rows = _load(data / "candidates-scifact.json.gz")[: 7 if smoke else 40]
    for length in (256, 128):
        model.max_length = length
        for depth in (3,) if smoke else (10, 20, 50):
            times = []
            for r in rows:
                if where == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                model.predict([(r["query"], docs[i]) for i in r["ids"][:depth]], batch_size=64, show_progress_bar=False)
                if where == "cuda":
                    torch.cuda.synchronize()
                times.append(1000 * (time.perf_counter() - started))
            latency.append(
                {
                    "max_tokens": length,
                    "depth": depth,
                    "p50_ms": round(statistics.median(times[2 if smoke else 5 :]), 1),
                }
            )
    report["gpu_latency_fp16"] = latency
    print("latency", latency, flush=True)
    del model
    everything = groups_of("all", docs)
    started = time.perf_counter()
    scores = teacher_scores(everything, reranker, device=where)
    report["teacher_seconds"] = round(time.perf_counter() - started, 1)
    distilled = Path("/tmp/distilled")
    dconfig = DistillationConfig(**json.loads(args.distill_config))
    report["distillation"] = train_margin_mse(
        everything, scores, args.base, distilled, dconfig, device=where, minimum_pairs=minimum
    )
    print("distillation", report["distillation"], flush=True)
    passages = _load(data / "passages-scifact.json.gz")[: 20 if smoke else None]
    queries = [r["query"] for r in _load(data / "candidates-scifact.json.gz")][: 3 if smoke else None]
    vectors: dict[str, Any] = {}
    for label, path in (("base", args.base), ("distilled", distilled)):
        encoder = SentenceTransformer(str(path), device=where).float()
        vectors[f"{label}_passages"] = encoder.encode([t for _, t in passages], batch_size=256).astype(np.float16)
        vectors[f"{label}_queries"] = encoder.encode(queries, batch_size=256).astype(np.float16)
    np.savez_compressed(out / "vectors-scifact.npz", **vectors)
    from safetensors.torch import load_file, save_file

    weights = {k: v.half() for k, v in load_file(str(reranker / "model.safetensors")).items()}
    save_file(weights, "/tmp/reranker-fp16.safetensors")
    blob = Path("/tmp/reranker-fp16.safetensors").read_bytes()
    part = 15 * 1024 * 1024
    for i in range(0, len(blob), part):
        (out / f"reranker.part{i // part}").write_bytes(blob[i : i + part])
    (out / "report.json").write_text(json.dumps(report, indent=2))


def report(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from ferret.core.eval.beir import load_qrels
    from ferret.core.eval.metrics import evaluate_run
    from ferret.core.index.types import SearchHit
    from ferret.core.rerank.cross_encoder import fused_scores
    from ferret.core.search.fusion import Fusion, fuse

    table: dict[str, Any] = {"rerank": [], "distillation": []}
    for dataset in (d for d in (args.scifact, args.nfcorpus) if d is not None):
        name = dataset.name
        cache = args.results / f"cache-{name}.jsonl"
        rows = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
        all_qrels = load_qrels(dataset, "test")
        qrels = {r["qid"]: all_qrels[r["qid"]] for r in rows}
        first = evaluate_run({r["qid"]: {i: 100.0 - k for k, i in enumerate(r["ids"])} for r in rows}, qrels)
        print(f"{name}: first stage nDCG@10 {first['ndcg@10']:.1f} ({len(rows)} queries)")
        for field, length in (("cross256", 256), ("cross128", 128)):
            for depth in (10, 20, 50):
                for weight in (0.0, 0.25, 0.5, 0.75, 1.0):
                    run = {}
                    for r in rows:
                        ids, head = r["ids"], min(depth, len(r[field]))
                        fused = fused_scores(np.array(r["first"][:head]), np.array(r[field][:head]), weight)
                        order = sorted(range(head), key=lambda i: (-fused[i], i)) + list(range(head, len(ids)))
                        run[r["qid"]] = {ids[i]: float(len(ids) - rank) for rank, i in enumerate(order)}
                    m = evaluate_run(run, qrels)
                    row = {"dataset": name, "max_tokens": length, "depth": depth, "weight": weight,
                           "queries": len(rows), **{k: round(v, 2) for k, v in m.items()}}  # fmt: skip
                    table["rerank"].append(row)
                    print(
                        f"{name:9s} {length:4d} tok  depth {depth:3d}  reranker weight {weight:.2f}  "
                        f"nDCG@10 {m['ndcg@10']:5.1f}  MRR@10 {m['mrr@10']:5.1f}  ({len(rows)} queries)"
                    )
    vectors_path = args.results / "vectors-scifact.npz"
    if args.scifact is not None and vectors_path.exists():
        vectors = np.load(vectors_path)
        passages = _load(args.data / "passages-scifact.json.gz")
        owners = [e for e, _ in passages]
        rows = [json.loads(line) for line in (args.results / "cache-scifact.jsonl").read_text().splitlines()]
        all_qrels = load_qrels(args.scifact, "test")
        qrels = {r["qid"]: all_qrels[r["qid"]] for r in rows}
        for label in ("base", "distilled"):
            p = vectors[f"{label}_passages"].astype(np.float32)
            q = vectors[f"{label}_queries"].astype(np.float32)
            sims = q @ p.T
            dense_runs: dict[str, dict[str, float]] = {}
            hybrid: dict[str, dict[str, dict[str, float]]] = {"rrf": {}, f"convex α={args.alpha}": {}}
            for qi, r in enumerate(rows):
                best: dict[str, float] = {}
                for pi in np.argsort(-sims[qi])[:300]:
                    best.setdefault(owners[pi], float(sims[qi, pi]))
                ranked = sorted(best.items(), key=lambda kv: -kv[1])[:100]
                dense_runs[r["qid"]] = dict(ranked)
                dense_hits = [SearchHit(d, s, {}) for d, s in ranked]
                sparse_hits = [SearchHit(d, s, {}) for d, s in zip(r["sparse_ids"], r["sparse"], strict=True)]
                for key, fusion in (("rrf", Fusion()), (f"convex α={args.alpha}", Fusion("convex", args.alpha, "tmm"))):
                    merged = fuse(dense_hits, sparse_hits, fusion, limit=100)
                    hybrid[key][r["qid"]] = {h.id: h.score for h in merged}
            for mode, run in (("dense", dense_runs), *[(f"hybrid {k}", v) for k, v in hybrid.items()]):
                m = evaluate_run(run, qrels)
                table["distillation"].append({"encoder": label, "mode": mode, **{k: round(v, 2) for k, v in m.items()}})
                print(f"scifact {label:9s} {mode:22s} nDCG@10 {m['ndcg@10']:5.1f}  R@100 {m['recall@100']:5.1f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("prep", "device", "report"))
    parser.add_argument("--scifact", type=Path)
    parser.add_argument("--scifact-home", type=Path)
    parser.add_argument("--nfcorpus", type=Path)
    parser.add_argument("--nfcorpus-home", type=Path)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--results", type=Path)
    parser.add_argument("--base", type=Path)
    parser.add_argument("--ce-config", default="{}")
    parser.add_argument("--distill-config", default="{}")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.step == "prep":  # one dataset per process: the home is read once per process
        args.out.mkdir(parents=True, exist_ok=True)
        if args.scifact is not None:
            prep_dataset(args.scifact, args.scifact_home, args.alpha, args.out, groups=True)
        else:
            prep_dataset(args.nfcorpus, args.nfcorpus_home, None, args.out, groups=False)
    elif args.step == "device":
        args.out.mkdir(parents=True, exist_ok=True)
        device(args)
    else:
        table = report(args)
        if args.json:
            args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
