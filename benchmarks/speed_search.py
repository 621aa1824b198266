"""Part (b) of benchmarks/speed.py: search latency and HNSW recall over real sentence embeddings."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from rich.table import Table

if TYPE_CHECKING:
    pass


from speed_support import (
    CONCURRENCY,
    LATENCY_RATIO_GOAL,
    RECALL_GOAL,
    TOP_K,
    Latency,
    Platform,
    console,
    corpus_sentences,
    dataset_queries,
    embed_cached,
    indexed_vectors_note,
    measure,
    measure_interleaved,
    open_session,
    sentence_points,
)


def exact_top_k(matrix: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row indexes of the exact top-k by inner product (vectors are unit length: cosine)."""
    out = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 128):
        scores = queries[start : start + 128] @ matrix.T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        out[start : start + 128] = np.take_along_axis(top, order, axis=1)
    return out


def recall_at_k(found: Sequence[Sequence[int]], exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(f[:k]) & set(e.tolist())) / k for f, e in zip(found, exact, strict=True)]))


def search_benchmark(
    app: Platform,
    datasets: Sequence[Path],
    n_passages: int,
    n_queries: int,
    cache_dir: Path,
    hnsw_efs: Sequence[int],
) -> dict[str, Any]:
    import qdrant_edge as qe
    from sqlalchemy.orm import sessionmaker

    from ferret.core.db.corpus import create_corpus, get_corpus
    from ferret.core.db.engine import get_engine
    from ferret.core.db.index_version import active_index_version, create_index_version
    from ferret.core.db.models import IndexState, utcnow
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.types import DENSE, SearchRequest
    from ferret.core.index.versioned_collection import VersionedCollection
    from ferret.core.search.searcher import Searcher

    settings, backend = app.settings, app.backend
    result: dict[str, Any] = {}

    started = time.perf_counter()
    sentences = corpus_sentences(datasets, n_passages)
    texts = [s.text for s in sentences]
    queries = dataset_queries(datasets, n_queries)
    result["passages"] = len(texts)
    result["queries"] = len(queries)
    result["split_s"] = time.perf_counter() - started
    if len(texts) < n_passages:
        console.print(f"[yellow]only {len(texts)} distinct sentences in these datasets (asked {n_passages})[/yellow]")

    session = open_session(settings)
    try:
        model = ModelRegistry(session, settings).ensure_base()
        encoder = ModelRegistry(session, settings).encoder(model)
        names = "+".join(re.sub(r"[^A-Za-z0-9.-]+", "-", d.name) for d in datasets)
        key = f"speed-sentences_{names}_{len(texts)}_{Path(encoder.path).name}"
        console.print(f"[dim]embedding {len(texts)} sentences (cache {cache_dir / key}.npy)[/dim]")
        vectors, embed_meta = embed_cached(encoder, texts, cache_dir, key, settings.encode_batch_size)
        result["embed"] = embed_meta

        tokenizer: Any = encoder.tokenizer
        wordpieces = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        result["mean_words"] = float(np.mean([len(t.split()) for t in texts]))
        result["mean_wordpieces"] = float(np.mean(wordpieces))
        sparse_encoder = SparseEncoder.for_wordpiece_length(result["mean_wordpieces"])
        started = time.perf_counter()
        sparse = sparse_encoder.embed_documents(texts)
        result["sparse_s"] = time.perf_counter() - started

        corpus = create_corpus(session, f"speed-search-{app.stamp}")
        index_version = create_index_version(session, corpus, model, backend.kind)
        session.commit()
        points = sentence_points(corpus.id, sentences, vectors, sparse)
        row_of = {p.id: i for i, p in enumerate(points)}
        collection = index_version.collection
        backend.create_collection(collection, encoder.dimension)
        console.print(f"[dim]upserting {len(points)} points into {collection}[/dim]")
        started = time.perf_counter()
        backend.upsert(collection, points)
        result["upsert_s"] = time.perf_counter() - started
        del points
        console.print("[dim]finalize (HNSW build)[/dim]")
        started = time.perf_counter()
        backend.finalize(collection)
        result["finalize_s"] = time.perf_counter() - started
        shard = backend._shard(collection)  # the very shard object the backend queries
        info = shard.info()
        result["segments"] = info.segments_count
        result["indexed_vectors"] = info.indexed_vectors_count
        result["indexed"] = indexed_vectors_note(info.indexed_vectors_count, len(texts))
        index_version.state = IndexState.READY
        index_version.passage_count = index_version.point_count = len(texts)
        index_version.ready_at = utcnow()
        session.commit()
        VersionedCollection(session, settings, backend, corpus).promote(index_version)
        alias = corpus.name
    finally:
        session.close()

    started = time.perf_counter()
    query_vectors = encoder.encode_queries(queries)
    result["query_encode_batch_s"] = time.perf_counter() - started
    query_lists = [v.tolist() for v in query_vectors]
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    started = time.perf_counter()
    exact = exact_top_k(matrix, query_vectors, TOP_K)
    result["exact_batch_s"] = time.perf_counter() - started

    def raw_request(i: int, params: Any = None) -> Any:
        return qe.QueryRequest(query=qe.Query.Nearest(query_lists[i], using=DENSE), limit=TOP_K, params=params)

    def raw_ids(i: int, params: Any = None) -> list[int]:
        return [row_of[str(p.id)] for p in shard.query(raw_request(i, params))]

    def numpy_exact(i: int) -> np.ndarray:
        scores = matrix @ query_vectors[i]
        top = np.argpartition(-scores, TOP_K)[:TOP_K]
        return top[np.argsort(-scores[top])]

    searcher_sessions = [open_session(settings) for _ in range(max(CONCURRENCY))]
    # One searcher for the process, shared by every caller, as the runtime builds it (its caches are its state).
    searcher = Searcher(settings, backend, sessionmaker(get_engine(settings.database_url), expire_on_commit=False))
    searchers = [searcher] * max(CONCURRENCY)
    calls: dict[str, Callable[[int, int], object]] = {
        "platform Searcher.search, dense": lambda w, i: searchers[w].search(alias, queries[i], k=TOP_K, mode="dense"),
        "platform Searcher.search, hybrid": lambda w, i: searchers[w].search(alias, queries[i], k=TOP_K, mode="hybrid"),
        "query encoding alone": lambda w, i: encoder.encode_queries([queries[i]]),
        "Searcher's DB lookups alone (corpus, active version)": lambda w, i: active_index_version(
            searcher_sessions[w], get_corpus(searcher_sessions[w], alias)
        ),
        "raw EdgeShard.query (vector given)": lambda w, i: shard.query(raw_request(i)),
        f"raw EdgeShard.query, limit {TOP_K * 3} + payload": lambda w, i: shard.query(
            qe.QueryRequest(query=qe.Query.Nearest(query_lists[i], using=DENSE), limit=TOP_K * 3, with_payload=True)
        ),
        "EdgeIndexBackend.search dense (vector given)": lambda w, i: backend.search(
            alias, SearchRequest(limit=TOP_K * 3, mode="dense", dense=query_vectors[i])
        ),
        "exact numpy dot product (vector given)": lambda w, i: numpy_exact(i),
    }
    latencies: list[Latency] = []
    try:
        for concurrency in CONCURRENCY:
            for name, call in calls.items():
                console.print(f"[dim]latency: {name}, {concurrency} caller(s)[/dim]")
                latencies.append(measure(name, call, len(queries), concurrency))
        console.print("[dim]latency: platform, encoding and raw shard query interleaved, 1 caller[/dim]")
        trio = ("platform Searcher.search, dense", "query encoding alone", "raw EdgeShard.query (vector given)")
        interleaved = measure_interleaved({name: calls[name] for name in trio}, len(queries))
        latencies.extend(interleaved.values())
    finally:
        for s in searcher_sessions:
            s.close()
    result["latency"] = [asdict(x) for x in latencies]

    ratios: list[dict[str, Any]] = []
    for concurrency in CONCURRENCY:
        # One caller: from the interleaved run (same moments for all three); several: from the concurrent runs.
        suffix = " (interleaved)" if concurrency == 1 else ""
        by_path = {x.path: x for x in latencies if x.concurrency == concurrency}
        platform = by_path["platform Searcher.search, dense" + suffix]
        raw = by_path["raw EdgeShard.query (vector given)" + suffix]
        encoding = by_path["query encoding alone" + suffix]
        ratio = platform.p99_ms / (raw.p99_ms + encoding.p99_ms)
        ratios.append(
            {
                "concurrency": concurrency,
                "platform_p99_ms": platform.p99_ms,
                "raw_p99_ms": raw.p99_ms,
                "encoding_p99_ms": encoding.p99_ms,
                "ratio_p99": ratio,
                "ratio_p50": platform.p50_ms / (raw.p50_ms + encoding.p50_ms),
                "pass": ratio <= LATENCY_RATIO_GOAL,
            }
        )
    result["latency_ratio"] = ratios

    recall_rows: list[dict[str, Any]] = []
    settings_to_try: list[tuple[str, Any]] = [("HNSW, default ef", None)]
    settings_to_try += [(f"HNSW, hnsw_ef={ef}", qe.SearchParams(hnsw_ef=ef)) for ef in hnsw_efs]
    settings_to_try.append(("Qdrant exact=True", qe.SearchParams(exact=True)))
    for label, params in settings_to_try:
        console.print(f"[dim]recall: {label}[/dim]")
        found: list[list[int]] = []

        def call(_w: int, i: int, params: Any = params, found: list[list[int]] = found) -> None:
            found.append(raw_ids(i, params))

        timing = measure(label, call, len(queries), 1, warmup=0)
        recall_rows.append(
            {"search": label, "recall": recall_at_k(found, exact), "p50_ms": timing.p50_ms, "p99_ms": timing.p99_ms}
        )
    platform_found: list[list[int]] = []

    def platform_call(_w: int, i: int) -> None:
        hits = backend.search(alias, SearchRequest(limit=TOP_K * 3, mode="dense", dense=query_vectors[i]))
        platform_found.append([row_of[h.id] for h in hits[:TOP_K]])

    console.print("[dim]recall: platform request[/dim]")
    timing = measure("platform", platform_call, len(queries), 1, warmup=0)
    recall_rows.append(
        {
            "search": f"EdgeIndexBackend.search dense (limit {TOP_K * 3}, default ef), top {TOP_K}",
            "recall": recall_at_k(platform_found, exact),
            "p50_ms": timing.p50_ms,
            "p99_ms": timing.p99_ms,
        }
    )
    result["recall"] = recall_rows
    default_recall = recall_rows[0]["recall"]
    result["pass_recall"] = default_recall >= RECALL_GOAL
    result["pass_latency"] = all(r["pass"] for r in ratios)
    return result


def print_search(result: dict[str, Any]) -> None:
    embed = result["embed"]
    cached = " (cached: measured in an earlier run)" if embed["cached"] else ""
    build = Table(
        title=f"(b) Search index: {result['passages']:,} sentences of {result['mean_words']:.1f} words "
        f"({result['mean_wordpieces']:.1f} wordpieces), embedded backend"
    )
    for column in ("step", "seconds", "items/s"):
        build.add_column(column, justify="left" if column == "step" else "right")
    n = result["passages"]
    build.add_row(
        f"embed passages, {embed['device']}{cached}", f"{embed['seconds']:.1f}", f"{embed['per_second']:,.0f}"
    )
    build.add_row("BM25 sparse vectors", f"{result['sparse_s']:.1f}", f"{n / result['sparse_s']:,.0f}")
    build.add_row("upsert", f"{result['upsert_s']:.1f}", f"{n / result['upsert_s']:,.0f}")
    build.add_row(
        f"finalize: optimize (HNSW) + flush: {result['segments']} segments, {result['indexed']}",
        f"{result['finalize_s']:.1f}",
        f"{n / result['finalize_s']:,.0f}",
    )
    q = result["queries"]
    build.add_row(
        f"encode {q} queries in one batch",
        f"{result['query_encode_batch_s']:.2f}",
        f"{q / result['query_encode_batch_s']:,.0f}",
    )
    build.add_row(
        f"exact top-{TOP_K} of {q} queries, one numpy batch",
        f"{result['exact_batch_s']:.2f}",
        f"{q / result['exact_batch_s']:,.0f}",
    )
    console.print(build)

    table = Table(title=f"Search latency per request, {q} real queries, top {TOP_K}")
    for column in ("path", "callers", "p50 ms", "p99 ms", "mean ms", "QPS"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for row in result["latency"]:
        table.add_row(
            row["path"],
            str(row["concurrency"]),
            f"{row['p50_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            f"{row['mean_ms']:.2f}",
            f"{row['qps']:,.0f}",
        )
    console.print(table)
    for ratio in result["latency_ratio"]:
        verdict = "PASS" if ratio["pass"] else "FAIL"
        console.print(
            f"  {verdict}  {ratio['concurrency']} caller(s): platform p99 / (raw shard p99 + encoding p99) = "
            f"{ratio['platform_p99_ms']:.2f} / ({ratio['raw_p99_ms']:.2f} + {ratio['encoding_p99_ms']:.2f}) = "
            f"{ratio['ratio_p99']:.2f} (goal <= {LATENCY_RATIO_GOAL}); same at p50: {ratio['ratio_p50']:.2f}"
        )

    recall = Table(title=f"Recall@{TOP_K} against exact search (numpy), 1 caller")
    for column in ("search", f"recall@{TOP_K}", "p50 ms", "p99 ms"):
        recall.add_column(column, justify="left" if column == "search" else "right")
    for row in result["recall"]:
        recall.add_row(row["search"], f"{row['recall']:.4f}", f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}")
    console.print(recall)
    verdict = "PASS" if result["pass_recall"] else "FAIL"
    console.print(f"  {verdict}  recall@{TOP_K} at default ef >= {RECALL_GOAL}")


# -- main ----------------------------------------------------------------------------------------------------------
