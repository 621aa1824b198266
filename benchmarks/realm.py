"""REALM pre-training on a BEIR dataset: retrieval utility over training, zero-shot Recall@5, dense and hybrid
nDCG@10 for base, ICT and REALM, and the paper's two ablations (salient vs random-span masking; refresh every N
steps vs a 30× staler index).

Three steps, because the GPU machine has no spaCy, no Qdrant and no network (MODELS.md, "The GPU machine"):

    # here (CPU): mask with spaCy, write a bundle (passages, masked sentences, queries, qrels, MiniLM in fp16)
    python benchmarks/realm.py prepare --dataset ../shared/datasets/scifact --bundle /tmp/realm-bundle
    # there (or here, slowly): ICT + REALM runs, exact MIPS over an in-memory passage matrix (MatrixRefreshStore)
    python benchmarks/realm.py train --bundle /tmp/realm-bundle --out /tmp/realm-out --steps 300
    # here: BM25 (bm25s) for the hybrid rows, metrics, tables, the RU curve as a PNG if matplotlib is installed
    python benchmarks/realm.py report --dataset ../shared/datasets/scifact --results /tmp/realm-out/results.json

``train`` uses the same trainer as ``ferret realm pretrain`` (``ferret.core.realm.trainer``); only the refresh
store differs (exact inner products over a matrix instead of internal Qdrant collections). A document is one
passage here (title + abstract, cut at 256 wordpieces), as in EVALUATION.md's reference rows.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import subprocess
import time
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# -- prepare (CPU, spaCy) ---------------------------------------------------------------------------------------
def prepare(
    dataset: Path,
    bundle: Path,
    split: str,
    max_docs: int | None,
    seed: int,
    max_corpus_docs: int | None = None,
    max_queries: int | None = None,
) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.encoder.registry import base_model_path
    from ferret.core.eval.beir import iter_corpus, load_qrels, load_queries
    from ferret.core.realm.masking import CorpusPassage, SpanMasker, split_held_out

    docs = list(iter_corpus(dataset))[:max_corpus_docs]  # a smaller corpus keeps index refreshes short on CPU
    passages = [CorpusPassage(i, i, f"{d.title}\n{d.text}".strip()) for i, d in enumerate(docs)]
    # Sentences come from the first ``max_docs`` documents (spaCy is the slow part on 2 cores); a span must occur
    # again in another document of the whole corpus, and training retrieves over the whole corpus.
    masked_from = passages[:max_docs]
    started = time.perf_counter()
    masker = SpanMasker("salient")
    sentences = masker.sentences(masked_from)
    salient = masker.mask(masked_from, seed=seed, corpus=passages, sentences=sentences)
    mask_seconds = time.perf_counter() - started
    random_span = SpanMasker("random_span", nlp=masker.nlp).mask(masked_from, seed=seed, sentences=sentences)
    random_token = SpanMasker("random_token", nlp=masker.nlp).mask(masked_from, seed=seed, sentences=sentences)
    queries, qrels = load_queries(dataset), load_qrels(dataset, split)
    kept = {d.doc_id for d in docs}
    query_ids = [q for q in qrels if q in queries and any(doc in kept for doc in qrels[q])]
    if max_queries is not None and len(query_ids) > max_queries:
        query_ids = sorted(random.Random(seed).sample(query_ids, max_queries))
    data: dict[str, Any] = {
        "dataset": dataset.name,
        "doc_ids": [d.doc_id for d in docs],
        "passages": [p.text for p in passages],
        "queries": {q: queries[q] for q in query_ids},
        "mask_seconds": round(mask_seconds, 1),
        "masked_documents": len(masked_from),
    }
    for name, examples in (("salient", salient), ("random_span", random_span), ("random_token", random_token)):
        train, held = split_held_out(examples, 0.1, seed)
        data[name] = {"train": [e.to_json() for e in train], "held_out": [e.to_json() for e in held]}
    bundle.mkdir(parents=True, exist_ok=True)
    with gzip.open(bundle / "data.json.gz", "wt") as handle:
        json.dump(data, handle)
    model = SentenceTransformer(str(base_model_path()), device="cpu", local_files_only=True)
    model.to(torch.float16).save(str(bundle / "model"))
    print(
        f"{len(passages)} passages; salient sentences {len(salient)} (masked in {mask_seconds:.0f} s), "
        f"random-span sentences {len(random_span)}; bundle {bundle}"
    )


# -- train (GPU or CPU, plain torch, no spaCy / Qdrant) -----------------------------------------------------------
def _dense_run(
    model_path: str, data: dict[str, Any], device: str, doc_model_path: str | None = None
) -> dict[str, dict[str, float]]:
    """Top 100 documents of each query by exact inner product (whole documents, 256 wordpieces); the documents are
    embedded by ``doc_model_path`` when given (a REALM run with a frozen document tower)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    def load(path: str) -> Any:
        model = SentenceTransformer(path, device=device, local_files_only=True)
        if device.startswith("cuda"):
            model.half()
        model.max_seq_length = 256
        return model

    model = load(model_path)
    doc_model = load(doc_model_path) if doc_model_path else model
    docs = doc_model.encode(data["passages"], batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
    query_ids = list(data["queries"])
    queries = model.encode([data["queries"][q] for q in query_ids], normalize_embeddings=True, convert_to_numpy=True)
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(docs, dtype=np.float32).T
    del model, doc_model
    torch.cuda.empty_cache() if device.startswith("cuda") else None
    run = {}
    for row, qid in enumerate(query_ids):
        top = np.argsort(-scores[row])[:100]
        run[qid] = {data["doc_ids"][i]: round(float(scores[row, i]), 5) for i in top}
    return run


def _fp32_copy(source: Path, target: Path) -> str:
    """The bundle's fp16 model as fp32 for training (fp16 master weights do not train)."""
    import torch
    from sentence_transformers import SentenceTransformer

    if not target.exists():
        SentenceTransformer(str(source), device="cpu", local_files_only=True).to(torch.float32).save(str(target))
    return str(target)


def _print_progress(activity: str, fraction: float, counts: dict[str, Any]) -> None:
    """One line per report, so a slow CPU run shows where it is in its log."""
    print(f"{time.strftime('%H:%M:%S')} {activity} {100 * fraction:.0f}% {json.dumps(counts)}", flush=True)


VARIANTS: dict[str, dict[str, Any]] = {
    "realm": {"masking": "salient"},
    "realm_random_span": {"masking": "random_span"},
    "realm_random_token": {"masking": "random_token"},
    "realm_stale_30x": {"masking": "salient", "stale": 30},
    "realm_frozen_doc": {"masking": "salient", "freeze_doc_tower": True},
    "realm_low_lr": {"masking": "salient", "retriever_learning_rate": 3e-6},
}
"""Variant → its settings: the paper's ablations (Guu et al. 2020, Table 2: masking; the refresh interval times
``stale``) and two attempts at a retriever that drifts less from the base model (a frozen document tower; a
retriever learning rate a third of the default)."""


def train(
    bundle: Path,
    out: Path,
    steps: int,
    refresh_every: int,
    batch_size: int,
    budget_s: float,
    *,
    variants: list[str],
    ict_steps: int | None = None,
    k: int | None = None,
    mlm_warmup_steps: int | None = None,
    max_passage_tokens: int = 256,
    base_run: bool = True,
    stop_at: float | None = None,
) -> None:
    """ICT (unless ``ict_steps`` is 0) then each REALM variant; results merge into ``out/results.json`` so each
    variant can run as its own short job. ``stop_at`` (a Unix time): the REALM steps stop early enough that the
    WiSE-FT choice and the rankings still end before it (variants run as parallel processes on a leased GPU)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.realm.config import RealmConfig
    from ferret.core.realm.ict import ict_warmup
    from ferret.core.realm.masking import CorpusPassage, MaskedSentence, MaskingStrategy
    from ferret.core.realm.refresh import MatrixRefreshStore
    from ferret.core.realm.trainer import RealmData, RealmTrainer
    from realm_wise import choose_share

    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True  # TF32 matmuls: the loop was 1.5 s/step in plain fp32 on the H100
    torch.backends.cudnn.allow_tf32 = True
    with gzip.open(bundle / "data.json.gz", "rt") as handle:
        data = json.load(handle)
    out.mkdir(parents=True, exist_ok=True)
    base = _fp32_copy(bundle / "model", out / "base_fp32")
    passages = [CorpusPassage(i, i, text) for i, text in enumerate(data["passages"])]
    path = out / "results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": {}, "realm": {}}
    results["device"] = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.machine()})"

    def save() -> None:
        path.write_text(json.dumps(results))

    if base_run and "base" not in results["runs"]:
        results["runs"]["base"] = _dense_run(base, data, device)
        save()

    ict_steps = max(steps // 2, 1) if ict_steps is None else ict_steps
    start_dir = base
    if ict_steps > 0:
        ict_dir = out / "ict"
        if not ict_dir.exists():
            ict_started = time.perf_counter()
            ict_model = SentenceTransformer(base, device=device, local_files_only=True)
            batch = 64 if device == "cuda" else 4
            report = ict_warmup(ict_model, passages, steps=ict_steps, batch_size=batch, seed=13)
            ict_model.save(str(ict_dir))
            results["ict"] = {**report.__dict__, "wall_s": round(time.perf_counter() - ict_started, 1)}
            results["runs"]["ict"] = _dense_run(str(ict_dir), data, device)
            save()
        start_dir = str(ict_dir)
    for name in variants:
        settings = VARIANTS[name]
        masking, stale = settings["masking"], settings.get("stale", 1)
        if time.perf_counter() - started > budget_s:
            results["realm"][name] = {"skipped": "time budget"}
            continue
        run_started = time.perf_counter()
        sentences = {
            split: [MaskedSentence.from_json(e) for e in data[masking][split]] for split in ("train", "held_out")
        }
        config = RealmConfig(
            steps=steps,
            k=k or (8 if device == "cuda" else 4),
            batch_size=batch_size,
            masking=cast(MaskingStrategy, masking),
            mlm_warmup_steps=max(steps // 2, 1) if mlm_warmup_steps is None else mlm_warmup_steps,
            warmup_batch_size=64 if device == "cuda" else 8,
            refresh_every=refresh_every * stale,
            eval_every=max(steps // (10 if device == "cuda" else 5), 1),
            checkpoint_every=steps,
            max_held_out=256 if device == "cuda" else 32,
            max_passage_tokens=max_passage_tokens,
            device=device,
            freeze_doc_tower=settings.get("freeze_doc_tower", False),
            retriever_learning_rate=settings.get("retriever_learning_rate", RealmConfig.retriever_learning_rate),
        )
        trainer = RealmTrainer(
            config,
            start_dir,
            RealmData(passages, sentences["train"], sentences["held_out"]),
            MatrixRefreshStore(),
            out / f"run_{name}",
            progress=_print_progress,
            time_budget_s=None if stop_at is None else stop_at - time.time() - 75,  # 75 s: WiSE-FT and rankings
        )
        result = trainer.run()
        wise = choose_share(trainer, result.best_dir, base, out, name)
        results["realm"][name] = {
            **result.as_dict(),
            "refresh_every": config.refresh_every,
            "freeze_doc_tower": config.freeze_doc_tower,
            "retriever_learning_rate": config.retriever_learning_rate,
            "wise_ru": wise["shares"],
            "wise_chosen": wise["chosen"],
            "wall_s": round(time.perf_counter() - run_started, 1),
        }
        docs = base if config.freeze_doc_tower else None
        # the RU-chosen share is the variant's row; the other shares are rankings for the record, chosen by nothing
        results["runs"][name] = _dense_run(wise["dirs"][wise["chosen"]], data, device, docs)
        save()
        if device == "cuda":
            for share, folder in wise["dirs"].items():
                if share not in ("0", wise["chosen"]):
                    results["runs"][f"{name}@{share}"] = _dense_run(folder, data, device, docs)
            save()
        link = out / f"{name}_wise"  # what realm_qa.py and realm_promptagator.py read
        link.unlink(missing_ok=True)
        link.symlink_to(Path(wise["dirs"][wise["chosen"]]).resolve())
    results["wall_s"] = round(time.perf_counter() - started, 1)
    save()
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, default=str)[:6000])


# -- report (CPU: BM25, metrics, tables, PNG) ----------------------------------------------------------------------
def _fuse(dense: dict[str, float], bm25: dict[str, float], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion, as the platform's hybrid mode does inside Qdrant (k=60)."""
    fused: dict[str, float] = {}
    for ranking in (dense, bm25):
        for rank, doc_id in enumerate(sorted(ranking, key=lambda d: -ranking[d])):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank + 1)
    return fused


def report(dataset: Path, results_path: Path, split: str, png: Path | None) -> None:
    from ferret.core.eval.beir import iter_corpus, load_qrels, load_queries
    from ferret.core.eval.metrics import evaluate_run, recall_at_k
    from ferret.core.search.bm25_ranker import BM25Ranker

    results = json.loads(results_path.read_text())
    qrels = load_qrels(dataset, split)
    queries = load_queries(dataset)
    query_ids = [q for q in qrels if q in queries]
    bm25 = BM25Ranker({d.doc_id: (d.title, d.text) for d in iter_corpus(dataset)})
    bm25_run = dict(zip(query_ids, bm25.search([queries[q] for q in query_ids], k=100), strict=True))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"REALM benchmark, {dataset.name} ({split}), commit {commit}, trained on: {results['device']}")
    print(f"{'model':<22} {'dense nDCG@10':>13} {'hybrid nDCG@10':>14} {'Recall@5':>9}")
    bm25_scores = evaluate_run(bm25_run, qrels)
    print(f"{'bm25s':<22} {bm25_scores['ndcg@10']:>13.1f} {'':>14} {'':>9}")
    for name, run in results["runs"].items():
        dense = evaluate_run(run, qrels)["ndcg@10"]
        hybrid = evaluate_run({q: _fuse(run.get(q, {}), bm25_run.get(q, {})) for q in query_ids}, qrels)["ndcg@10"]
        recall5 = [
            recall_at_k(sorted(run.get(q, {}), key=lambda d: -run[q][d]), qrels[q], 5)
            for q in query_ids
            if any(r > 0 for r in qrels[q].values())
        ]
        print(f"{name:<22} {dense:>13.1f} {hybrid:>14.1f} {100 * sum(recall5) / len(recall5):>9.1f}")
    if "ict" in results:
        ict = results["ict"]
        print(
            f"ICT warm start: {ict['steps']} steps in {ict['wall_s']} s, "
            f"loss {ict['first_loss']:.2f} → {ict['last_loss']:.2f}"
        )
    print("\nretrieval utility (held-out, top passage vs null, nats per masked wordpiece) over training")
    for name, run in results["realm"].items():
        if "skipped" in run:
            print(f"{name}: skipped ({run['skipped']})")
            continue
        curve = ", ".join(f"{u['step']}:{u['retrieval_utility']:+.3f}" for u in run["utility"])
        mlm = run["warmup"].get("mlm", {})
        print(
            f"{name}: best RU {run['best_utility']:+.3f} at step {run['best_step']}; staleness mean "
            f"{run['staleness_mean']:.1f} max {run['staleness_max']} steps; refreshes {run['refreshes']} "
            f"(failed {run['failed_refreshes']}); {run['wall_s']} s; MLM warm-up {mlm.get('steps')} steps "
            f"{mlm.get('seconds', 0):.0f} s loss {mlm.get('first_loss', 0):.2f} → {mlm.get('last_loss', 0):.2f}"
        )
        print(f"  RU by step: {curve}")
        if "wise_ru" in run:
            shares = ", ".join(f"{share}:{ru:+.3f}" for share, ru in run["wise_ru"].items())
            print(f"  held-out RU by REALM share of WiSE-FT (0 = base): {shares}; chosen {run['wise_chosen']}")
    if png is None:
        return
    from ferret.core.realm.plot import plot_utility

    curves = {name: run["utility"] for name, run in results["realm"].items() if "utility" in run}
    plot_utility(curves, png, title=f"REALM retrieval utility, {dataset.name}")
    print(f"RU curve: {png}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--max-docs", type=int, default=None)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--max-corpus-docs", type=int, default=None, help="keep only the first N documents")
    p.add_argument("--max-queries", type=int, default=None, help="a seeded sample of N queries")
    t = sub.add_parser("train")
    t.add_argument("--bundle", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--refresh-every", type=int, default=10)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--budget-s", type=float, default=420.0, help="start no new REALM run after this many seconds")
    t.add_argument("--variants", default="realm,realm_random_span,realm_stale_30x", help=", ".join(VARIANTS))
    t.add_argument("--ict-steps", type=int, default=None, help="0: REALM starts from the base model")
    t.add_argument("--k", type=int, default=None)
    t.add_argument("--mlm-warmup-steps", type=int, default=None)
    t.add_argument("--max-passage-tokens", type=int, default=256)
    t.add_argument("--no-base-run", action="store_true", help="another process ranks with the base model")
    t.add_argument("--stop-at", type=float, default=None, help="Unix time by which the process must be done")
    r = sub.add_parser("report")
    r.add_argument("--dataset", type=Path, required=True)
    r.add_argument("--results", type=Path, required=True)
    r.add_argument("--split", default="test")
    r.add_argument("--png", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.dataset, args.bundle, args.split, args.max_docs, args.seed, args.max_corpus_docs, args.max_queries)
    elif args.command == "train":
        train(
            args.bundle,
            args.out,
            args.steps,
            args.refresh_every,
            args.batch_size,
            args.budget_s,
            variants=[v for v in args.variants.split(",") if v],
            ict_steps=args.ict_steps,
            k=args.k,
            mlm_warmup_steps=args.mlm_warmup_steps,
            max_passage_tokens=args.max_passage_tokens,
            base_run=not args.no_base_run,
            stop_at=args.stop_at,
        )
    else:
        report(args.dataset, args.results, args.split, args.png)


if __name__ == "__main__":
    main()
