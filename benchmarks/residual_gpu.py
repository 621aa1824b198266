"""Dual encoder trained on what BM25 misses (issue 12 item 4b), measured with the training on a GPU.

Usage:
    python benchmarks/residual_gpu.py prepare --dataset ../shared/datasets/scifact --home H --out DIR
    (on the GPU machine) python benchmarks/residual_gpu.py device --data DIR --base MINILM_DIR --out OUT
    python benchmarks/residual_gpu.py report --dataset ../shared/datasets/scifact --rankings OUT/rankings.json

``prepare`` reads the pipeline's training pairs from a home where ``benchmarks/search_configs.py`` ran (the kept
synthetic queries of the non-held-out documents, as the train stage splits them), mines one BM25 negative per pair
and its normalised BM25 gap (``bm25_residual_negatives``), and writes them with the corpus passages and the test
queries. ``device`` runs Ferret's own ``train_dual_encoder`` three times with the pipeline's defaults (lr 1e-5,
WiSE-FT 0.5, steps and batch scaled for a GPU): in-batch negatives only, + BM25 hard negatives, + the residual
objective (CLEAR), then embeds the passages with each model and the base one and writes each test query's top 100
documents (MaxP). ``report`` scores them: dense alone, and fused with BM25 (bm25s, reciprocal rank fusion at the
document level, k=60) since Ferret always fuses with BM25; the residual objective is meant to help the fused row.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
VARIANTS = ("none", "bm25", "residual")


def prepare(args: argparse.Namespace) -> None:
    os.environ["FERRET_HOME"] = str(args.home)
    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.document import iter_passages
    from ferret.core.db.synthetic import document_texts, latest_run, training_pairs
    from ferret.core.db.task import get_task
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.evaluate import corpus_name_for
    from ferret.core.pipeline.promptagator.state import PipelineConfig
    from ferret.core.synth.retrievers import BM25Retriever
    from ferret.core.training.guard_evidence import passage_texts, split_held_out
    from ferret.core.training.hard_negatives import bm25_hard_negatives, bm25_residual_negatives
    from ferret.runtime.context import app_context

    defaults = PipelineConfig()
    with app_context() as ctx:
        session = ctx.session
        corpus = get_corpus(session, corpus_name_for(args.dataset))
        run = latest_run(session, get_task(session, args.task))
        assert run is not None
        train, held_out = split_held_out(training_pairs(session, run), defaults.held_out_fraction, defaults.seed)
        texts = passage_texts(document_texts(session, corpus))
        bm25 = BM25Retriever.for_corpus(session, corpus)
        negatives = bm25_hard_negatives(bm25, train, texts, seed=defaults.seed)
        residual = bm25_residual_negatives(bm25.scores, train, texts, seed=defaults.seed)
        passages = [
            (document.external_id, passage_text(document.title, passage.text))
            for batch in iter_passages(session, corpus)
            for passage, document in batch
        ]
    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    data: dict[str, Any] = {
        "pairs": [(query, texts[document_id]) for query, document_id in train],
        "held_out": len(held_out),
        "bm25_negatives": negatives,
        "residual": residual,
        "passages": passages,
        "queries": {q: queries[q] for q in qrels if q in queries},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / "data.json.gz", "wt") as handle:
        json.dump(data, handle)
    gaps = [gap for _, gap in residual]
    print(f"{len(train)} pairs ({len(held_out)} held out), {len(passages)} passages, {len(data['queries'])} queries;")
    misses = sum(gap < 0 for gap in gaps)
    print(f"BM25 gap: mean {sum(gaps) / len(gaps):.3f}, negative (BM25 prefers the negative) {misses}")


def device(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.training.config import DualEncoderTrainingConfig
    from ferret.core.training.dual_encoder_trainer import train_dual_encoder

    with gzip.open(args.data / "data.json.gz", "rt") as handle:
        data = json.load(handle)
    args.out.mkdir(parents=True, exist_ok=True)
    base32 = Path("/tmp/minilm-fp32")
    if not base32.exists():  # carried in fp16 to fit the transfer; trained and averaged in fp32 as on a CPU
        model = SentenceTransformer(str(args.base), device="cpu", local_files_only=True).float()
        model.save(str(base32))
    queries = [query for query, _ in data["pairs"]]
    positives = [passage for _, passage in data["pairs"]]
    passage_ids = [doc for doc, _ in data["passages"]]
    passage_texts = [text for _, text in data["passages"]]
    query_ids = list(data["queries"])
    rankings: dict[str, dict[str, list[str]]] = {}
    timings: dict[str, float] = {}
    for variant in ("base", *VARIANTS):
        started = time.perf_counter()
        if variant == "base":
            path = base32
        else:
            config = DualEncoderTrainingConfig.scaled(
                len(queries), gpu=True, base_model=str(base32), output_dir=str(args.out / f"model-{variant}"),
                learning_rate=1e-5, base_weight=0.5, hard_negatives=variant, seed=13,
            )  # fmt: skip
            negatives = None if variant == "none" else (
                data["bm25_negatives"] if variant == "bm25" else [text for text, _ in data["residual"]]
            )  # fmt: skip
            gaps = [gap for _, gap in data["residual"]] if variant == "residual" else None
            path = train_dual_encoder(config, queries, positives, negatives=negatives, lexical_gaps=gaps)
            print(variant, config.batch_size, config.max_steps, config.loss, flush=True)
        trained = time.perf_counter() - started
        model = SentenceTransformer(str(path), device="cuda", local_files_only=True).half()
        model.max_seq_length = 256
        vectors = model.encode(passage_texts, batch_size=256, normalize_embeddings=True, convert_to_tensor=True)
        asked = model.encode([data["queries"][q] for q in query_ids], normalize_embeddings=True, convert_to_tensor=True)
        scores = (asked @ vectors.T).float().cpu().numpy()
        top = np.argsort(-scores, axis=1)[:, :400]
        rankings[variant] = {
            q: list(dict.fromkeys(passage_ids[i] for i in row))[:100] for q, row in zip(query_ids, top, strict=True)
        }
        timings[variant] = round(trained, 1)
        print(f"{variant}: trained {trained:.1f} s, total {time.perf_counter() - started:.1f} s", flush=True)
        del model
        torch.cuda.empty_cache()
    (args.out / "rankings.json").write_text(json.dumps({"rankings": rankings, "train_seconds": timings}))


def report(args: argparse.Namespace) -> None:
    from ferret.core.eval.beir import iter_corpus, load_qrels, load_queries
    from ferret.core.eval.metrics import evaluate_run
    from ferret.core.search.bm25_ranker import BM25Ranker

    result = json.loads(args.rankings.read_text())
    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    query_ids = [q for q in qrels if q in queries]
    corpus = {record.doc_id: (record.title, record.text) for record in iter_corpus(args.dataset)}
    bm25 = dict(zip(query_ids, BM25Ranker(corpus).search([queries[q] for q in query_ids], k=100), strict=True))
    rows: list[dict[str, Any]] = [{"name": "bm25 (bm25s)", **evaluate_run(bm25, qrels)}]
    for variant, ranking in result["rankings"].items():
        dense = {q: {doc: float(100 - r) for r, doc in enumerate(docs)} for q, docs in ranking.items()}
        fused: dict[str, dict[str, float]] = {}
        for q in query_ids:
            fused[q] = {}
            for source in (dense.get(q, {}), bm25[q]):
                for rank, doc in enumerate(sorted(source, key=lambda d: -source[d]), 1):
                    fused[q][doc] = fused[q].get(doc, 0.0) + 1.0 / (60 + rank)
        name = "base" if variant == "base" else f"trained, negatives {variant}"
        rows.append({"name": f"{name}: dense", **evaluate_run(dense, qrels)})
        rows.append({"name": f"{name}: RRF with BM25", **evaluate_run(fused, qrels)})
    for row in rows:
        print(f"{row['name']:<45} nDCG@10 {row['ndcg@10']:5.1f}  R@100 {row['recall@100']:5.1f}  "
              f"MRR@10 {row['mrr@10']:5.1f}")  # fmt: skip
    print("train seconds (GPU):", result.get("train_seconds"))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "train_seconds": result.get("train_seconds")}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--task", default="few-shot-ex250")
    p.add_argument("--split", default="test")
    p.add_argument("--out", type=Path, required=True)
    d = sub.add_parser("device")
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--base", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("--dataset", type=Path, required=True)
    r.add_argument("--split", default="test")
    r.add_argument("--rankings", type=Path, required=True)
    r.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    {"prepare": prepare, "device": device, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
