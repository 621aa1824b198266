"""Speed of the HTTP API beside the in-process search it wraps, one run: search latency and push throughput.

Usage:
    python benchmarks/api_speed.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        --dataset ../shared/datasets/squad-v1.1-dev [--passages 100000] [--queries 300] [--push-docs 2000] \
        [--push-batch 100] [--cache benchmarks/out] [--home DIR] [--json benchmarks/out/api-speed.json]
    python benchmarks/api_speed.py ... --passages 5000 --queries 100 --push-docs 300    # smoke run

Index: sentences of the datasets' corpora become --passages passages, embedded with the base model (cached as .npy
under --cache, shared with benchmarks/speed.py) and BM25-encoded, indexed in the embedded backend and promoted, as
benchmarks/speed_search.py does.
Search: the same real queries, first through ``Searcher.search`` in this process (the exact call the API makes,
with the caller's ACL groups), then through ``POST /v1/corpora/{corpus}/search`` of a real ``ferret serve``
(uvicorn, one worker, its own process: Qdrant Edge shards are opened by one process at a time), at 1, 8 and 32
concurrent clients (threads, one keep-alive HTTP connection each). Reported: p50/p99 per request and the ratio API /
in-process. Both run hybrid search by default (--mode).
Push: --push-docs documents of the datasets, in batches of --push-batch, through ``POST .../documents`` into a corpus
with an active index version (so each document is chunked, stored and embedded before the answer), then the same
batches again (all unchanged: the idempotent path). Reported in documents/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
from rich.table import Table

from speed_support import (
    TOP_K,
    Latency,
    console,
    corpus_sentences,
    dataset_queries,
    embed_cached,
    machine_info,
    measure,
    open_platform,
    open_session,
    sentence_points,
)

API_CONCURRENCY = (1, 8, 32)
SEARCH_CORPUS = "api-speed"
PUSH_CORPUS = "api-push"
CALLER_GROUPS = ["public"]


def build_search_index(home: Path, datasets: Sequence[Path], n_passages: int, cache_dir: Path) -> dict[str, Any]:
    """A promoted index of ``n_passages`` real sentences, built from cached embeddings (no documents in the DB: search
    reads only the index and, once per collection, the index version row)."""
    from ferret.core.db.corpus import create_corpus
    from ferret.core.db.index_version import create_index_version
    from ferret.core.db.models import IndexState, utcnow
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.versioned_collection import VersionedCollection

    app = open_platform(home)
    settings, backend = app.settings, app.backend
    sentences = corpus_sentences(datasets, n_passages)
    texts = [s.text for s in sentences]
    session = open_session(settings)
    try:
        registry = ModelRegistry(session, settings)
        model = registry.ensure_base()
        encoder = registry.encoder(model)
        names = "+".join(d.name for d in datasets)
        key = f"speed-sentences_{names}_{len(texts)}_{Path(encoder.path).name}"
        console.print(f"[dim]embedding {len(texts)} sentences (cache {cache_dir / key}.npy)[/dim]")
        vectors, embed_meta = embed_cached(encoder, texts, cache_dir, key, settings.encode_batch_size)
        tokenizer: Any = encoder.tokenizer
        lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        sparse = SparseEncoder.for_wordpiece_length(sum(lengths) / len(lengths)).embed_documents(texts)
        corpus = create_corpus(session, SEARCH_CORPUS)
        index_version = create_index_version(session, corpus, model, backend.kind)
        session.commit()
        points = sentence_points(corpus.id, sentences, vectors, sparse)
        backend.create_collection(index_version.collection, encoder.dimension)
        console.print(f"[dim]upserting {len(points)} points, then HNSW build[/dim]")
        started = time.perf_counter()
        backend.upsert(index_version.collection, points)
        backend.finalize(index_version.collection)
        index_s = time.perf_counter() - started
        index_version.state = IndexState.READY
        index_version.passage_count = index_version.point_count = len(points)
        index_version.ready_at = utcnow()
        session.commit()
        VersionedCollection(session, settings, backend, corpus).promote(index_version)
    finally:
        session.close()
        backend.close()
    return {"passages": len(texts), "embed": embed_meta, "upsert_and_hnsw_s": index_s}


def prepare_push_corpus(home: Path) -> None:
    """An empty-but-indexed corpus: one seed document, built and promoted, so pushes embed into a live version."""
    from ferret.core.corpus.push import PushedDocument, PushIngestor
    from ferret.core.db.corpus import create_corpus
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.versioned_collection import VersionedCollection
    from ferret.core.sources.documents import Document as SourceDocument

    app = open_platform(home)
    session = open_session(app.settings)
    try:
        corpus = create_corpus(
            session,
            PUSH_CORPUS,
            max_passage_tokens=app.settings.max_passage_tokens,
            passage_overlap_tokens=app.settings.passage_overlap_tokens,
        )
        seed = PushedDocument(SourceDocument(external_id="seed", text="A seed document so the corpus has an index."))
        PushIngestor(session, app.settings, app.backend, corpus).push("bench", [seed])
        versions = VersionedCollection(session, app.settings, app.backend, corpus)
        versions.promote(versions.build(ModelRegistry(session, app.settings).ensure_base()))
    finally:
        session.close()
        app.backend.close()


def create_key(home: Path) -> str:
    from ferret.core.db.api_key import create_api_key
    from ferret.core.settings import FerretSettings

    session = open_session(FerretSettings(home=home))
    try:
        _, plaintext = create_api_key(session, f"bench-{time.time_ns()}", ["admin"], [])  # admin: it reads jobs
        session.commit()
        return plaintext
    finally:
        session.close()


def with_load(latency: Latency) -> dict[str, Any]:
    """A row with the machine's 1-minute load average when it ended: the cores are shared (issue 16)."""
    return {**asdict(latency), "load_1m": round(os.getloadavg()[0], 2)}


def in_process_latencies(home: Path, queries: list[str], mode: str, requests: int) -> list[dict[str, Any]]:
    from sqlalchemy.orm import sessionmaker

    from ferret.core.db.engine import get_engine
    from ferret.core.index.types import parse_mode
    from ferret.core.search.searcher import Searcher

    app = open_platform(home)
    sessions = [open_session(app.settings) for _ in range(max(API_CONCURRENCY))]
    searcher = Searcher(
        app.settings, app.backend, sessionmaker(get_engine(app.settings.database_url), expire_on_commit=False)
    )
    searchers = [searcher] * len(sessions)

    def call(worker: int, i: int) -> object:
        return searchers[worker].search(
            SEARCH_CORPUS,
            queries[i % len(queries)],
            k=TOP_K,
            mode=parse_mode(mode),
            acl_groups=CALLER_GROUPS,
        )

    try:
        results = []
        for concurrency in API_CONCURRENCY:
            console.print(f"[dim]in-process Searcher.search, {concurrency} caller(s)[/dim]")
            results.append(with_load(measure("in-process Searcher.search", call, requests, concurrency)))
        batcher = next(iter(searcher.query_batchers.values()), None)
        if batcher is not None:
            console.print(f"[dim]query batcher: {batcher.queries} queries in {batcher.batches} batches[/dim]")
        return results
    finally:
        for s in sessions:
            s.close()
        app.backend.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FERRET_HOME": str(home)}
    env.pop("FERRET_DATABASE_URL", None)
    env.pop("FERRET_QDRANT_URL", None)
    command = [sys.executable, "-c", "from ferret.cli.main import main; main()"]
    server = subprocess.Popen(
        [*command, "serve", "--port", str(port), "--log-level", "warning"], env=env, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError("ferret serve did not start")
        time.sleep(0.3)


def api_latencies(base: str, key: str, queries: list[str], mode: str, requests: int) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    clients = [httpx.Client(base_url=base, headers=headers, timeout=120) for _ in range(max(API_CONCURRENCY))]

    def call(worker: int, i: int) -> object:
        body = {"query": queries[i % len(queries)], "k": TOP_K, "mode": mode}
        response = clients[worker].post(f"/v1/corpora/{SEARCH_CORPUS}/search", json=body)
        response.raise_for_status()
        return response

    try:
        results = []
        for concurrency in API_CONCURRENCY:
            console.print(f"[dim]HTTP API search, {concurrency} client(s)[/dim]")
            results.append(with_load(measure("HTTP API POST .../search", call, requests, concurrency)))
        return results
    finally:
        for client in clients:
            client.close()


def push_throughput(base: str, key: str, datasets: Sequence[Path], n_docs: int, batch: int) -> dict[str, Any]:
    from itertools import islice

    from ferret.core.eval.beir import iter_corpus

    def records() -> Any:
        for dataset in datasets:
            for record in iter_corpus(dataset):
                yield {"external_id": f"{dataset.name}:{record.doc_id}", "title": record.title, "text": record.text}

    documents = list(islice(records(), n_docs))
    batches = [documents[i : i + batch] for i in range(0, len(documents), batch)]
    result: dict[str, Any] = {"documents": len(documents), "batch": batch}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=600) as client:
        for label in ("new", "unchanged"):
            console.print(f"[dim]push API: {len(documents)} {label} documents in batches of {batch}[/dim]")
            passages = 0
            jobs: list[str] = []
            accept_ms: list[float] = []
            started = time.perf_counter()
            for chunk in batches:
                sent = time.perf_counter()
                response = client.post(f"/v1/corpora/{PUSH_CORPUS}/documents", json={"documents": chunk})
                response.raise_for_status()
                accept_ms.append((time.perf_counter() - sent) * 1000)
                if response.status_code == 202:  # above the synchronous line: searchable when its job succeeds
                    jobs.append(response.json()["job_url"])
                else:
                    passages += response.json()["passages_added"]
            accepted = time.perf_counter() - started
            for job_url in jobs:
                while (job := client.get(job_url).raise_for_status().json())["state"] not in ("succeeded", "failed"):
                    time.sleep(0.05)
                if job["state"] != "succeeded":
                    raise RuntimeError(f"push job {job_url} failed: {job['error']}")
                passages += job["result"]["passages_added"]
            seconds = time.perf_counter() - started
            result[label] = {
                "seconds": seconds,
                "docs_per_s": len(documents) / seconds,
                "passages": passages,
                "jobs": len(jobs),
                "accepted_s": accepted,
                "accept_p50_ms": statistics.median(accept_ms),
            }
    return result


def print_search_table(result: dict[str, Any]) -> None:
    table = Table(
        title=f"Search latency, {result['index']['passages']:,} passages, {result['mode']} mode, top {TOP_K}, "
        f"{result['requests']} requests per row"
    )
    for column in (
        "clients",
        "in-process p50",
        "in-process p99",
        "in-proc QPS",
        "API p50",
        "API p99",
        "API QPS",
        "p50 ratio",
        "p99 ratio",
        "load (in-proc / API)",
    ):
        table.add_column(column, justify="right")
    for local, api in zip(result["in_process"], result["api"], strict=True):
        table.add_row(
            str(local["concurrency"]),
            f"{local['p50_ms']:.2f} ms",
            f"{local['p99_ms']:.2f} ms",
            f"{local['qps']:,.0f}",
            f"{api['p50_ms']:.2f} ms",
            f"{api['p99_ms']:.2f} ms",
            f"{api['qps']:,.0f}",
            f"{api['p50_ms'] / local['p50_ms']:.2f}",
            f"{api['p99_ms'] / local['p99_ms']:.2f}",
            f"{local['load_1m']:.1f} / {api['load_1m']:.1f}",
        )
    console.print(table)


def print_tables(result: dict[str, Any]) -> None:
    print_search_table(result)
    push = result["push"]
    table = Table(title=f"Push API ingestion: {push['documents']:,} documents in batches of {push['batch']}, 1 client")
    for column in ("documents", "jobs", "all accepted s", "accept p50", "searchable s", "documents/s", "passages"):
        table.add_column(column, justify="right")
    for label in ("new", "unchanged"):
        row = push[label]
        table.add_row(
            label,
            str(row["jobs"]),
            f"{row['accepted_s']:.1f}",
            f"{row['accept_p50_ms']:.0f} ms",
            f"{row['seconds']:.1f}",
            f"{row['docs_per_s']:,.1f}",
            f"{row['passages']:,}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    parser.add_argument("--dataset", type=Path, action="append", default=None, help="BEIR folder; repeatable")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300, help="distinct queries; also requests per row")
    parser.add_argument("--mode", choices=("dense", "sparse", "hybrid"), default="hybrid")
    parser.add_argument("--push-docs", type=int, default=2000)
    parser.add_argument("--push-batch", type=int, default=100)
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--home", type=Path, default=None, help="FERRET_HOME of the run; default: a temporary folder")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    datasets = args.dataset or [shared / name for name in ("scifact", "nfcorpus", "squad-v1.1-dev")]

    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-api-speed-"))
    result: dict[str, Any] = {"machine": machine_info(), "mode": args.mode}
    try:
        result["index"] = build_search_index(home, datasets, args.passages, args.cache)
        prepare_push_corpus(home)
        key = create_key(home)
        queries = dataset_queries(datasets, args.queries)
        result["requests"] = len(queries)
        result["in_process"] = in_process_latencies(home, queries, args.mode, len(queries))
        port = free_port()
        server = start_server(home, port)
        try:
            base = f"http://127.0.0.1:{port}"
            result["api"] = api_latencies(base, key, queries, args.mode, len(queries))
            print_search_table(result)  # before the push part, so its figures survive a failed push
            result["push"] = push_throughput(base, key, datasets, args.push_docs, args.push_batch)
        finally:
            server.terminate()
            server.wait(timeout=60)
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    print_tables(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
