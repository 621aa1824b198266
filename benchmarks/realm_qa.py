"""Open-domain QA on SQuAD with provenance (issue 13): exact match and passage Recall@5 of a span reader over the
top-k passages of a retriever, for the base retriever and REALM-trained ones, side by side.

    # a span reader on questions of articles that the QA corpus never contains (article-disjoint)
    python benchmarks/realm_qa.py train-reader --dataset ../shared/datasets/squad-v1.1-dev \\
        --bundle /tmp/realm-bundle --out /tmp/reader --steps 100
    # EM and Recall@5 on questions about the bundle's corpus (the passages REALM pre-trained on, unsupervised)
    python benchmarks/realm_qa.py eval --dataset ../shared/datasets/squad-v1.1-dev --bundle /tmp/realm-bundle \\
        --reader /tmp/reader --retriever base=/tmp/realm-out/base_fp32 --retriever realm=/tmp/realm-out/realm_wise

The bundle is ``benchmarks/realm.py prepare``'s (its corpus: the first N paragraphs). Answers are marginalised over
the top k passages exactly as ``ferret ask`` does (``ferret.core.qa.answering.answer_from_passages``); EM uses
SQuAD's answer normalisation.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _article(passage_id: str | None) -> str:
    """``squad-dev-a07-p012`` → ``a07``."""
    parts = (passage_id or "").split("-")
    return parts[2] if len(parts) > 3 else ""


def _bundle(bundle: Path) -> dict[str, Any]:
    with gzip.open(bundle / "data.json.gz", "rt") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


class _OutOfTime(Exception):
    """Raised from the step callback when the training budget is spent: the reader is saved as it is."""


def train_reader(
    dataset: Path,
    bundle: Path,
    out: Path,
    steps: int,
    batch_size: int,
    max_tokens: int,
    budget_s: float,
    device: str = "cpu",
    base: Path | None = None,
) -> None:
    from ferret.core.qa.span_reader import SpanReader, train_span_reader
    from ferret.core.qa.squad import load_qa_dataset, reading_examples

    corpus_articles = {_article(doc_id) for doc_id in _bundle(bundle)["doc_ids"]}
    questions, passages = load_qa_dataset(dataset)
    kept = [q for q in questions if _article(q.gold_passage) not in corpus_articles]
    examples = reading_examples(kept, passages)
    if base is None:  # the registry needs the database modules, which the GPU machine lacks: pass --base there
        from ferret.core.encoder.registry import base_model_path

        base = base_model_path()
    reader = SpanReader.build(base, max_tokens=max_tokens, device=device)
    started = time.perf_counter()
    losses: list[tuple[int, float]] = []

    def show(step: int, loss: float) -> None:
        losses.append((step, loss))
        if step % 5 == 0 or step == 1:
            print(f"{time.strftime('%H:%M:%S')} step {step} loss {loss:.3f}", flush=True)
        if time.perf_counter() - started > budget_s:
            raise _OutOfTime

    try:
        train_span_reader(reader, examples, steps=steps, batch_size=batch_size, learning_rate=1e-4, on_step=show)
    except _OutOfTime:
        reader.model.eval()
    info = {
        "articles_excluded": sorted(corpus_articles),
        "pairs": len(examples),
        "steps_done": losses[-1][0] if losses else 0,
        "steps_planned": steps,
        "batch_size": batch_size,
        "first_loss": losses[0][1] if losses else None,
        "last_loss": losses[-1][1] if losses else None,
        "seconds": round(time.perf_counter() - started, 1),
        "max_tokens": max_tokens,
    }
    reader.save(out, info=info)
    print(json.dumps(info))


def evaluate(
    dataset: Path,
    bundle: Path,
    reader_dir: Path,
    retrievers: list[str],
    max_questions: int,
    k: int,
    seed: int,
    device: str = "cpu",
) -> None:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from ferret.core.qa.answer_normalization import exact_match
    from ferret.core.qa.answering import RetrievedPassage, answer_from_passages
    from ferret.core.qa.span_reader import SpanReader
    from ferret.core.qa.squad import load_qa_dataset

    data = _bundle(bundle)
    doc_ids: list[str] = data["doc_ids"]
    index = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    questions = [q for q in load_qa_dataset(dataset)[0] if q.gold_passage in index]
    questions = sorted(
        random.Random(seed).sample(questions, min(max_questions, len(questions))), key=lambda q: q.question_id
    )
    reader = SpanReader.load(reader_dir, device=device)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(
        f"open-domain QA, {dataset.name}: {len(questions)} questions over {len(doc_ids)} passages, k={k}, "
        f"reader {reader_dir.name}, commit {commit}"
    )
    print(f"{'retriever':<22} {'Recall@5':>9} {'EM':>6} {'seconds':>8}")
    for spec in retrievers:
        name, path = spec.split("=", 1)
        started = time.perf_counter()
        if not Path(path).exists():
            print(f"{name:<22} missing: {path}")
            continue
        model = SentenceTransformer(path, device=device, local_files_only=True)
        model.max_seq_length = 256
        passages = np.asarray(model.encode(data["passages"], batch_size=32, normalize_embeddings=True))
        queries = np.asarray(model.encode([q.question for q in questions], normalize_embeddings=True))
        scores = queries @ passages.T
        hits, matches = 0, 0.0
        for row, question in enumerate(questions):
            top = np.argsort(-scores[row])[:k]
            hits += index[question.gold_passage or ""] in top[:5]
            retrieved = [
                RetrievedPassage(int(i), doc_ids[i], "", data["passages"][i], float(scores[row, i])) for i in top
            ]
            answer = answer_from_passages(question.question, retrieved, reader).best
            matches += exact_match(answer.text, question.answers)
        seconds = time.perf_counter() - started
        print(f"{name:<22} {100 * hits / len(questions):>9.1f} {100 * matches / len(questions):>6.1f} {seconds:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train-reader")
    t.add_argument("--dataset", type=Path, required=True)
    t.add_argument("--bundle", type=Path, required=True, help="its corpus's articles are left out of training")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--steps", type=int, default=100)
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--max-tokens", type=int, default=256)
    t.add_argument("--budget-s", type=float, default=480.0, help="stop training (and save) after this many seconds")
    t.add_argument("--device", default="cpu")
    t.add_argument("--base", type=Path, default=None, help="the encoder to start from (default: the base MiniLM)")
    e = sub.add_parser("eval")
    e.add_argument("--dataset", type=Path, required=True)
    e.add_argument("--bundle", type=Path, required=True)
    e.add_argument("--reader", type=Path, required=True)
    e.add_argument("--retriever", action="append", required=True, help="name=sentence-transformers folder")
    e.add_argument("--max-questions", type=int, default=200)
    e.add_argument("--k", type=int, default=5)
    e.add_argument("--seed", type=int, default=13)
    e.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.command == "train-reader":
        train_reader(
            args.dataset,
            args.bundle,
            args.out,
            args.steps,
            args.batch_size,
            args.max_tokens,
            args.budget_s,
            args.device,
            args.base,
        )
    else:
        evaluate(
            args.dataset, args.bundle, args.reader, args.retriever, args.max_questions, args.k, args.seed, args.device
        )


if __name__ == "__main__":
    main()
