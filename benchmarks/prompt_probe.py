"""Prompt variants for the embedded generator: which gives queries that retrieve their own document?

Usage:
    PREFIX=1 python benchmarks/prompt_probe.py ../shared/datasets/scifact 8ex 3ex 8ex-short

``PREFIX=0`` turns the shared-prefix key/value cache off (plain ``generate``), to rule out a sampler bug. 24
documents × 2 samples; the base model ranks each query's source document among about 1,500 documents. A probe
behind a table of RESULTS.md, not a benchmark of record.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import base_model_path
from ferret.core.llm.local_backend import LocalTransformersBackend
from ferret.core.synth.prompt import PromptBuilder, document_text, truncate
from ferret.core.synth.query_text import clean_generation, normalize


def read_dataset(folder: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Documents as the prompt shows them, and 8 (document, query) examples of the train split (seed 13)."""
    with (folder / "corpus.jsonl").open() as lines:
        corpus = {row["_id"]: document_text(row["title"], row["text"]) for row in map(json.loads, lines)}
    with (folder / "queries.jsonl").open() as lines:
        queries = {row["_id"]: row["text"] for row in map(json.loads, lines)}
    first_document: dict[str, str] = {}
    with (folder / "qrels" / "train.tsv").open() as lines:
        for line in list(lines)[1:]:
            query_id, document_id, _ = line.split("\t")
            first_document.setdefault(query_id, document_id)
    chosen = random.Random(13).sample(sorted(first_document), 8)
    return corpus, [(corpus[first_document[q]], queries[q]) for q in chosen]


def main() -> None:
    torch.set_num_threads(1)
    corpus, examples = read_dataset(Path(sys.argv[1]))
    ids = sorted(corpus)
    targets = random.Random(7).sample(ids, 24)
    pool = sorted(set(random.Random(8).sample(ids, 1500)) | set(targets))
    position = {document_id: k for k, document_id in enumerate(pool)}
    encoder = DualEncoder.load(base_model_path(), device="cpu")
    matrix = encoder.encode_passages([corpus[i][:1500] for i in pool])
    llm = LocalTransformersBackend(batch_size=8, reuse_prefix=os.environ.get("PREFIX", "1") == "1")
    variants: dict[str, Callable[[], PromptBuilder]] = {
        "8ex": lambda: PromptBuilder("Article", "Claim", examples),
        "3ex": lambda: PromptBuilder("Article", "Claim", examples[:3]),
        "8ex-short": lambda: PromptBuilder("Article", "Claim", [(truncate(d, 250), q) for d, q in examples]),
    }
    example_queries = {normalize(q) for _, q in examples}
    for name in sys.argv[2:]:
        builder = variants[name]()
        started = time.time()
        prompts = [builder.build(corpus[i]) for i in targets]
        outputs = llm.complete(prompts, n=2, temperature=0.7, max_tokens=48, stop=["\n"])
        texts, labels = [], []
        for document_id, completions in zip(targets, outputs, strict=True):
            for completion in completions:
                if query := clean_generation(completion.text, "Claim"):
                    texts.append(query)
                    labels.append(document_id)
        copies = sum(normalize(q) in example_queries for q in texts)
        scores = encoder.encode_queries(texts) @ matrix.T
        gold = scores[np.arange(len(texts)), [position[d] for d in labels]]
        ranks = (scores > gold[:, None]).sum(axis=1) + 1
        mrr = float(np.mean(np.where(ranks <= 10, 1 / ranks, 0)))
        print(
            f"{name}: {len(texts)} queries, {copies} example copies, top1 {np.mean(ranks <= 1):.2f} "
            f"top10 {np.mean(ranks <= 10):.2f} mrr10 {mrr:.3f}, {time.time() - started:.0f}s",
            flush=True,
        )
        for query in texts[:4]:
            print("   ", query[:120])


if __name__ == "__main__":
    main()
