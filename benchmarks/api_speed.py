"""Speed of the HTTP API beside the in-process search it wraps, one run: search latency and push throughput.

Usage:
    python benchmarks/api_speed.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        --dataset ../shared/datasets/squad-v1.1-dev [--passages 100000] [--queries 300] [--push-docs 2000] \
        [--push-batch 100] [--push-poll-ms 0] [--client wrk|threads] [--seconds 20] \
        [--query-encoder torch|onnx|onnx-int8] [--cache benchmarks/out] [--home DIR] \
        [--json benchmarks/out/api-speed.json]
    python benchmarks/api_speed.py ... --passages 5000 --queries 100 --push-docs 300    # smoke run
    # the issue-16 search table, reusing the index kept in DIR by a first run with the same --home:
    python benchmarks/api_speed.py --passages 100000 --push-docs 0 --home /tmp/ferret-api-100k

Index: sentences of the datasets' corpora become --passages passages, embedded with the base model (cached as .npy
under --cache, shared with benchmarks/speed.py; benchmarks/gpu_million.py or gpu_speed.py can make the 100k cache
on a GPU) and BM25-encoded, indexed in the embedded backend and promoted, as benchmarks/speed_search.py does. With
--home, a second run finds that index and reuses it (the build at 100k takes most of a run on 2 cores).
Search: the same real queries, first through ``Searcher.search`` in this process (the exact call the API makes,
with the caller's ACL groups, from Python threads), then through ``POST /v1/corpora/{corpus}/search`` of a real
``ferret serve`` (uvicorn, one worker, its own process: Qdrant Edge shards are opened by one process at a time), at
1, 8 and 32 concurrent clients. The API's load generator is wrk (benchmarks/wrk_load.py: C, one thread, --seconds
per row after a 3 s warm-up) when installed (``make system-deps``), else Python threads with one keep-alive httpx
connection each (--client threads), which on 2 cores take as much CPU as the server. Every API row reports the CPU
the server process and the load generator used during it (in cores), and the 1-minute load average, because the
cores may be shared. Reported: p50/p99 per request and the ratio API / in-process. Hybrid search by default (--mode).
--query-encoder sets FERRET_QUERY_ENCODER for this process and the server; --profile FILE samples the server with
py-spy (``pip install py-spy``; needs ptrace rights) during the 32-client row: every thread, waiting ones included,
each stack under its thread's name (the query batcher's thread shows how busy the encoder is, the AnyIO workers
where a request waits); with --profile-gil only the thread holding the GIL (the searches' serial part).
Push: --push-docs documents of the datasets (0: none), in batches of --push-batch, through ``POST .../documents``
into a fresh corpus with an active index version (above the synchronous line each batch is a ``push_index`` job),
then the same batches again (all unchanged: the idempotent path). Reported in documents/s until searchable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
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
from rich.console import Console
from rich.table import Table

import wrk_load
from api_push import print_push_table, push_throughput
from speed_support import (
    TOP_K,
    WARMUP_CALLS,
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
CALLER_GROUPS = ["public"]


def build_search_index(home: Path, datasets: Sequence[Path], n_passages: int, cache_dir: Path) -> dict[str, Any]:
    """A promoted index of ``n_passages`` real sentences, built from cached embeddings (no documents in the DB: search
    reads only the index and, once per collection, the index version row)."""
    from ferret.core.db.corpus import create_corpus, find_corpus
    from ferret.core.db.index_version import create_index_version
    from ferret.core.db.models import IndexState, utcnow
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.versioned_collection import VersionedCollection

    app = open_platform(home)
    settings, backend = app.settings, app.backend
    session = open_session(settings)
    try:
        existing = find_corpus(session, SEARCH_CORPUS)
        if existing is not None:  # a kept --home: its promoted index serves this run too
            collection = backend.resolve_alias(VersionedCollection(session, settings, backend, existing).alias)
            count = backend.count(collection) if collection else 0
            if count != n_passages:
                raise SystemExit(f"{home} holds an index of {count} passages, not {n_passages}: use another --home")
            console.print(f"[dim]reusing the {count:,}-passage index in {home}[/dim]")
            backend.close()  # the server it starts next must be able to load the shards
            return {"passages": count, "reused": True}
    finally:
        session.close()
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


def prepare_push_corpus(home: Path, name: str) -> None:
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
            name,
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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profiler(pid: int, seconds: float, output: Path, gil: bool = False) -> subprocess.Popen[bytes]:
    """py-spy (PyPI) sampling the server's threads for ``seconds``, without pausing it (--nonblocking), as folded
    stacks (one line per distinct stack with its sample count: grep and sort them, or feed them to a flame graph).
    With ``gil``, only the thread holding the GIL is sampled: where the serial part of a search goes."""
    py_spy = Path(sys.executable).with_name("py-spy")
    command = [str(py_spy) if py_spy.exists() else "py-spy", "record", "--pid", str(pid), "--nonblocking"]
    if gil:
        command += ["--gil", "--threads"]
    else:
        command += ["--idle", "--threads"]  # waiting threads too, each under its thread's name: where requests wait
    command += ["--format", "raw", "--rate", "100", "--duration", str(max(1, round(seconds))), "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def api_latencies(
    base: str,
    key: str,
    queries: list[str],
    mode: str,
    requests: int,
    client: str,
    seconds: float,
    server_pid: int,
    profile: Path | None = None,
    profile_gil: bool = False,
) -> list[dict[str, Any]]:
    """One row per concurrency, with the CPU (in cores) the server and the load generator used during it; with
    ``profile``, py-spy samples the server during the busiest row."""
    headers = {"Authorization": f"Bearer {key}"}
    bodies = [{"query": query, "k": TOP_K, "mode": mode} for query in queries]
    clients = [httpx.Client(base_url=base, headers=headers, timeout=120) for _ in range(max(API_CONCURRENCY))]

    def call(worker: int, i: int) -> object:
        response = clients[worker].post(f"/v1/corpora/{SEARCH_CORPUS}/search", json=bodies[i % len(bodies)])
        response.raise_for_status()
        return response

    try:
        for i in range(min(WARMUP_CALLS, len(bodies))):  # the server's first searches load the model and caches
            call(0, i)
        results = []
        for concurrency in API_CONCURRENCY:
            console.print(f"[dim]HTTP API search, {concurrency} client(s), {client}[/dim]")
            server_before, wall_before, client_before = (
                process_cpu_s(server_pid),
                time.perf_counter(),
                time.process_time(),
            )
            profiler = None
            if profile is not None and concurrency == max(API_CONCURRENCY):
                profiler = start_profiler(server_pid, seconds + (3 if client == "wrk" else 0), profile, profile_gil)
            if client == "wrk":
                url = f"{base}/v1/corpora/{SEARCH_CORPUS}/search"
                row = wrk_load.measure_wrk(url, headers, bodies, concurrency, seconds)
            else:
                row = asdict(measure("HTTP API POST .../search", call, requests, concurrency))
            if profiler is not None:
                profiler.wait(timeout=120)
                console.print(f"[dim]py-spy profile of the server at {concurrency} clients: {profile}[/dim]")
                row["client_cpu_cores"] = (time.process_time() - client_before) / (time.perf_counter() - wall_before)
            row["server_cpu_cores"] = (process_cpu_s(server_pid) - server_before) / (time.perf_counter() - wall_before)
            results.append({**row, "load_1m": round(os.getloadavg()[0], 2)})
        return results
    finally:
        for http in clients:
            http.close()


def print_search_table(result: dict[str, Any]) -> None:
    table = Table(
        title=f"Search latency, {result['index']['passages']:,} passages, {result['mode']} mode, top {TOP_K}; "
        f"in-process {result['requests'] if result.get('in_process') else 'not run: 0'} requests per row, API by "
        f"{result['client']}; "
        f"query encoder {result['query_encoder']}"
    )
    for column in (
        "clients",
        "in-process p50",
        "in-process p99",
        "in-proc QPS",
        "API p50",
        "API p99",
        "API QPS",
        "API requests",
        "p50 ratio",
        "p99 ratio",
        "server / client CPU (cores)",
        "load (in-proc / API)",
    ):
        table.add_column(column, justify="right")
    locals_ = result.get("in_process") or [None] * len(result["api"])  # None: --api-only
    for local, api in zip(locals_, result["api"], strict=True):

        def here(key: str, unit: str = " ms", local: dict[str, Any] | None = local) -> str:
            if local is None:
                return "n/a"
            return f"{local[key]:,.2f}{unit}" if unit else f"{local[key]:,.1f}"

        def ratio(key: str, local: dict[str, Any] | None = local, api: dict[str, Any] = api) -> str:
            return "n/a" if local is None else f"{api[key] / local[key]:.2f}"

        table.add_row(
            str(api["concurrency"]),
            here("p50_ms"),
            here("p99_ms"),
            here("qps", ""),
            f"{api['p50_ms']:.2f} ms",
            f"{api['p99_ms']:.2f} ms",
            f"{api['qps']:,.0f}",
            f"{api['requests']:,}",
            ratio("p50_ms"),
            ratio("p99_ms"),
            f"{api['server_cpu_cores']:.2f} / {api['client_cpu_cores']:.2f}",
            f"{here('load_1m', '')} / {api['load_1m']:.1f}",
        )
    Console(width=200).print(table)  # wider than the shared console: the rows stay one line each


def print_tables(result: dict[str, Any]) -> None:
    if "api" in result:
        print_search_table(result)
    if "push" in result:
        print_push_table(result["push"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    parser.add_argument("--dataset", type=Path, action="append", default=None, help="BEIR folder; repeatable")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300, help="distinct queries; also requests per row")
    parser.add_argument("--mode", choices=("dense", "sparse", "hybrid"), default="hybrid")
    parser.add_argument("--push-docs", type=int, default=2000)
    parser.add_argument("--push-batch", type=int, default=100)
    parser.add_argument(
        "--push-poll-ms",
        type=float,
        default=0,
        help="poll each push job every N ms instead of one GET ?wait= (0), as a client that polls would",
    )
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--home", type=Path, default=None, help="FERRET_HOME of the run; default: a temporary folder")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--client",
        choices=("wrk", "threads"),
        default="wrk" if wrk_load.available() else "threads",
        help="API load generator: wrk (C, one thread; default when installed) or Python threads with httpx",
    )
    parser.add_argument("--no-search", action="store_true", help="the push part only")
    parser.add_argument("--api-only", action="store_true", help="no in-process rows (the ratio columns read n/a)")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy's folded stacks of the server at 32 clients")
    parser.add_argument("--profile-gil", action="store_true", help="--profile samples only the thread holding the GIL")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per wrk row (after 3 s of warm-up)")
    parser.add_argument(
        "--query-encoder",
        default=os.environ.get("FERRET_QUERY_ENCODER"),
        help="FERRET_QUERY_ENCODER for this process and the server (torch, onnx, onnx-int8); default: the platform's",
    )
    args = parser.parse_args()
    if args.query_encoder:
        os.environ["FERRET_QUERY_ENCODER"] = args.query_encoder
    datasets = args.dataset or [shared / name for name in ("scifact", "nfcorpus", "squad-v1.1-dev")]

    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-api-speed-"))
    result: dict[str, Any] = {
        "machine": machine_info(),
        "mode": args.mode,
        "client": args.client,
        "query_encoder": args.query_encoder or "default",
    }
    try:
        result["index"] = build_search_index(home, datasets, args.passages, args.cache)
        push_corpus = f"api-push-{time.time_ns()}"  # a kept --home gets a fresh push corpus each run
        if args.push_docs:
            prepare_push_corpus(home, push_corpus)
        key = create_key(home)
        queries = dataset_queries(datasets, args.queries)
        result["requests"] = len(queries)
        if not args.no_search and not args.api_only:
            result["in_process"] = in_process_latencies(home, queries, args.mode, len(queries))
        port = free_port()
        server = start_server(home, port)
        try:
            base = f"http://127.0.0.1:{port}"
            if not args.no_search:
                result["api"] = api_latencies(
                    base,
                    key,
                    queries,
                    args.mode,
                    len(queries),
                    args.client,
                    args.seconds,
                    server.pid,
                    profile=args.profile,
                    profile_gil=args.profile_gil,
                )
                print_search_table(result)  # before the push part, so its figures survive a failed push
            if args.push_docs:
                result["push"] = push_throughput(
                    base,
                    key,
                    home,
                    push_corpus,
                    datasets,
                    args.push_docs,
                    args.push_batch,
                    poll_s=args.push_poll_ms / 1000 or None,
                )
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
