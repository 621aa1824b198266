"""Speed of the platform beside its raw parts, one run: indexing throughput and search latency.

Usage:
    python benchmarks/speed.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        --dataset ../shared/datasets/squad-v1.1-dev [--part both|index|search] [--index-docs 2000] \
        [--search-passages 100000] [--queries 500] [--cache benchmarks/out] [--home DIR] \
        [--json benchmarks/out/speed.json]

(a) Indexing: the first --index-docs documents of the datasets (in order) are ingested into a fresh corpus
    (chunking + database rows), built into a versioned collection (embed + BM25 + upsert + finalize) and promoted
    (alias swap). That end-to-end time is compared with the raw encoder's ``encode_passages`` on exactly the
    passage texts the platform embedded, same warm encoder, same run. Goal: overhead at most 10 %.
(b) Search: sentences of the datasets' corpora (regex splitter, 5-60 words, deduplicated; titles count as
    sentences) become --search-passages real passages, embedded with the base model (cached as .npy under
    --cache, so a re-run skips the embedding) and BM25-encoded, then indexed in the embedded backend. Real queries
    from the datasets' queries.jsonl are timed through the platform (``Searcher.search``: database lookup, query
    encoding, ``EdgeIndexBackend``, dedupe), the raw Qdrant Edge shard query, the query encoder alone and an exact
    numpy dot product, at 1 and 8 concurrent callers. Goals: platform p99 at most 1.2 x (raw shard p99 + encoding
    p99), and HNSW recall@10 against exact search at least 0.95.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from unittest.mock import patch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ferret.core.encoder.dual_encoder import DualEncoder
    from ferret.core.index.edge_backend import EdgeIndexBackend
    from ferret.core.settings import FerretSettings

P = ParamSpec("P")
R = TypeVar("R")

CONCURRENCY = (1, 8)
TOP_K = 10
OVERHEAD_GOAL = 0.10
LATENCY_RATIO_GOAL = 1.2
RECALL_GOAL = 0.95
MIN_WORDS, MAX_WORDS = 5, 60
WARMUP_CALLS = 20

# Wide enough for the tables when the output goes to a file or a pipe (rich would wrap at 80 columns).
console = Console(width=None if sys.stdout.isatty() else 132)


# -- machine -------------------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()


def machine_info() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": round(_memory_gib(), 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if cuda else None,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


# -- timing helpers ------------------------------------------------------------------------------------------------
class Stages:
    """Seconds spent per named stage, accumulated by wrappers patched around the platform's own pieces."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, stage: str, fn: Callable[P, R]) -> Callable[P, R]:
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started

        return wrapper

    def get(self, stage: str) -> float:
        return self.seconds.get(stage, 0.0)


@dataclass
class Latency:
    path: str
    concurrency: int
    requests: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    qps: float


def measure(
    path: str, call: Callable[[int, int], object], requests: int, concurrency: int, *, warmup: int = WARMUP_CALLS
) -> Latency:
    """Per-request latency and throughput of ``call(worker, request)`` from ``concurrency`` threads at once."""
    for worker in range(concurrency):  # every worker's state (sessions, caches) is warm before timing
        for i in range(min(warmup if worker == 0 else 3, requests)):
            call(worker, i)
    seconds = np.zeros(requests)

    def work(worker: int, start: threading.Barrier | None) -> None:
        if start is not None:
            start.wait()
        for i in range(worker, requests, concurrency):
            began = time.perf_counter()
            call(worker, i)
            seconds[i] = time.perf_counter() - began

    if concurrency == 1:
        began = time.perf_counter()
        work(0, None)
        wall = time.perf_counter() - began
    else:
        barrier = threading.Barrier(concurrency + 1)
        with ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(work, w, barrier) for w in range(concurrency)]
            barrier.wait()
            began = time.perf_counter()
            for future in futures:
                future.result()
            wall = time.perf_counter() - began
    ms = seconds * 1000
    p50, p99 = np.percentile(ms, [50, 99])
    return Latency(path, concurrency, requests, float(p50), float(p99), float(ms.mean()), requests / wall)


# -- data ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sentence:
    dataset: str
    doc_id: str
    ordinal: int
    text: str


# A sentence ends at . ! ? before a capital or digit (so "e.g. the" and "et al. found" stay whole), or at ";".
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|(?<=;)\s+")


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_BREAK.split(" ".join(text.split())) if s]


def corpus_sentences(datasets: Sequence[Path], limit: int) -> list[Sentence]:
    """The first ``limit`` distinct sentences of 5-60 words (titles included) of the datasets' corpora, in order."""
    from ferret.connectors.beir.loader import iter_corpus

    seen: set[str] = set()
    sentences: list[Sentence] = []
    for dataset in datasets:
        for record in iter_corpus(dataset):
            for ordinal, text in enumerate([" ".join(record.title.split()), *split_sentences(record.text)]):
                if MIN_WORDS <= len(text.split()) <= MAX_WORDS and text not in seen:
                    seen.add(text)
                    sentences.append(Sentence(dataset.name, record.doc_id, ordinal, text))
                    if len(sentences) == limit:
                        return sentences
    return sentences


def dataset_queries(datasets: Sequence[Path], limit: int) -> list[str]:
    """Distinct query texts (``_id`` and ``text`` only), taken round-robin from the datasets."""
    from ferret.connectors.beir.loader import load_queries

    pools = [iter(load_queries(dataset).values()) for dataset in datasets]
    seen: set[str] = set()
    queries: list[str] = []
    while pools and len(queries) < limit:
        for pool in list(pools):
            text = next(pool, None)
            if text is None:
                pools.remove(pool)
            elif text.strip() and text not in seen:
                seen.add(text)
                queries.append(text)
                if len(queries) == limit:
                    break
    return queries


def embed_with_progress(
    encoder: DualEncoder, texts: Sequence[str], batch_size: int, chunk: int = 8192
) -> tuple[np.ndarray, float]:
    """``encode_passages`` over length-sorted chunks (as sentence-transformers sorts), printing progress."""
    order = np.argsort([-len(text) for text in texts], kind="stable")
    vectors = np.zeros((len(texts), encoder.dimension), dtype=np.float32)
    started = time.perf_counter()
    for start in range(0, len(texts), chunk):
        rows = order[start : start + chunk]
        vectors[rows] = encoder.encode_passages([texts[i] for i in rows], batch_size=batch_size)
        done, elapsed = min(start + chunk, len(texts)), time.perf_counter() - started
        console.print(
            f"[dim]  {done:,}/{len(texts):,} embedded, {done / elapsed:,.0f}/s, "
            f"at most {(len(texts) - done) * elapsed / done / 60:.1f} min left (longest first)[/dim]"
        )
    return vectors, time.perf_counter() - started


def embed_cached(
    encoder: DualEncoder, texts: Sequence[str], cache_dir: Path, key: str, batch_size: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """Passage embeddings, from ``<cache>/<key>.npy`` when its text hash matches, else encoded and saved."""
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    vectors_file, meta_file = cache_dir / f"{key}.npy", cache_dir / f"{key}.json"
    if vectors_file.is_file() and meta_file.is_file():
        meta = json.loads(meta_file.read_text())
        vectors = np.load(vectors_file)
        same_input = meta.get("sha256") == digest and meta.get("model") == encoder.path
        if same_input and vectors.shape == (len(texts), encoder.dimension):
            return vectors, {**meta, "cached": True, "file": str(vectors_file)}
    encoder.encode_passages(texts[:batch_size], batch_size=batch_size)  # warm-up batch
    vectors, seconds = embed_with_progress(encoder, texts, batch_size)
    meta = {
        "sha256": digest,
        "model": encoder.path,
        "device": encoder.device,
        "texts": len(texts),
        "seconds": seconds,
        "per_second": len(texts) / seconds,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(vectors_file, vectors)
    meta_file.write_text(json.dumps(meta, indent=1))
    return vectors, {**meta, "cached": False, "file": str(vectors_file)}


# -- platform context ----------------------------------------------------------------------------------------------
@dataclass
class Platform:
    settings: FerretSettings
    backend: EdgeIndexBackend
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%d%H%M%S"))


def open_platform(home: Path) -> Platform:
    from ferret.core.cli.context import ensure_schema
    from ferret.core.index.edge_backend import EdgeIndexBackend
    from ferret.core.settings import FerretSettings

    settings = FerretSettings(home=home, qdrant_url=None)
    settings.ensure_home()
    ensure_schema(settings)
    return Platform(settings, EdgeIndexBackend(settings.qdrant_path))


def open_session(settings: FerretSettings) -> Session:
    from sqlalchemy.orm import sessionmaker

    from ferret.core.db.engine import get_engine

    return sessionmaker(get_engine(settings.database_url), expire_on_commit=False)()


def dense_hnsw_built(indexed_vectors: int, points: int) -> bool:
    """Whether the dense vectors have an HNSW graph, from the shard's count of indexed vectors.

    Qdrant counts indexed vectors over all named vectors; the BM25 sparse vectors are always indexed (inverted
    index), the dense ones only in segments above the indexing threshold (10 MB of vectors by default).
    """
    return indexed_vectors >= 2 * points


# -- (a) indexing throughput ---------------------------------------------------------------------------------------
def first_documents_connector(datasets: Sequence[Path], limit: int) -> Any:
    """A BEIR connector over the first ``limit`` documents of the datasets, one source named ``beir``."""
    from ferret.connectors.base import ConnectorOutput
    from ferret.connectors.beir.connector import BeirConnector

    class FirstDocuments(BeirConnector):
        def load_from_source(self) -> ConnectorOutput:
            def documents() -> ConnectorOutput:
                for dataset in datasets:
                    yield from BeirConnector(path=str(dataset), name=self.source_name).load_from_source()

            return islice(documents(), limit)

    return FirstDocuments(path=str(datasets[0]), name="beir")


def index_benchmark(app: Platform, datasets: Sequence[Path], n_docs: int) -> dict[str, Any]:
    from ferret.core.corpus.chunking import passage_text
    from ferret.core.corpus.ingest import Ingestor
    from ferret.core.db.corpus import create_corpus
    from ferret.core.db.document import iter_passages
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.points import PointBuilder
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.versioned_collection import VersionedCollection

    settings, backend = app.settings, app.backend
    session = open_session(settings)
    try:
        model = ModelRegistry(session, settings).ensure_base()
        encoder = ModelRegistry(session, settings).encoder(model)
        corpus = create_corpus(
            session,
            f"speed-index-{app.stamp}",
            max_passage_tokens=settings.max_passage_tokens,
            passage_overlap_tokens=settings.passage_overlap_tokens,
        )
        session.commit()
        connector = first_documents_connector(datasets, n_docs)
        warm = [passage_text(d.title, d.text) for d in islice(connector.load_from_source(), settings.encode_batch_size)]
        encoder.encode_passages(warm, batch_size=settings.encode_batch_size)  # warm-up batch, before both timings
        ingestor = Ingestor(session, settings, backend, corpus)  # loads the chunking tokenizer (once per process)
        stages = Stages()

        console.print(f"[dim]ingesting {n_docs} documents into {corpus.name}[/dim]")
        with patch.object(ingestor.chunker, "chunk", stages.timed("chunk", ingestor.chunker.chunk)):
            started = time.perf_counter()
            report = ingestor.run(connector)
            ingest_s = time.perf_counter() - started

        rows = [row for batch in iter_passages(session, corpus) for row in batch]
        texts = [passage_text(document.title, passage.text) for passage, document in rows]
        tokens = [passage.token_count for passage, _ in rows]
        console.print(f"[dim]raw encode of {len(texts)} passages[/dim]")
        started = time.perf_counter()
        encoder.encode_passages(texts, batch_size=settings.encode_batch_size)
        raw_s = time.perf_counter() - started

        console.print("[dim]build + promote[/dim]")
        versions = VersionedCollection(session, settings, backend, corpus)
        with ExitStack() as stack:
            for owner, name, stage in (
                (encoder, "encode_passages", "embed"),
                (SparseEncoder, "embed_documents", "sparse"),
                (PointBuilder, "build", "points"),
                (backend, "create_collection", "create"),
                (backend, "upsert", "upsert"),
                (backend, "finalize", "finalize"),
                (backend, "count", "count"),
            ):
                stack.enter_context(patch.object(owner, name, stages.timed(stage, getattr(owner, name))))
            started = time.perf_counter()
            index_version = versions.build(model)
            build_s = time.perf_counter() - started
        started = time.perf_counter()
        versions.promote(index_version)
        promote_s = time.perf_counter() - started
        info = backend._shard(index_version.collection).info()  # the shard the backend itself holds open
    finally:
        session.close()

    platform_s = ingest_s + build_s + promote_s
    breakdown = {
        "chunk (tokenizer)": stages.get("chunk"),
        "documents + passages to DB": ingest_s - stages.get("chunk"),
        "embed (dense)": stages.get("embed"),
        "sparse (BM25)": stages.get("sparse"),
        "point assembly": stages.get("points") - stages.get("embed") - stages.get("sparse"),
        "upsert": stages.get("upsert"),
        "finalize (optimize + flush)": stages.get("finalize"),
        "create collection + payload indexes": stages.get("create"),
        "read passages, count, DB bookkeeping": build_s
        - stages.get("points")
        - stages.get("create")
        - stages.get("upsert")
        - stages.get("finalize"),
        "promote (alias swap)": promote_s,
    }
    n = len(texts)
    return {
        "documents": report.added,
        "passages": n,
        "mean_passage_tokens": float(np.mean(tokens)),
        "device": encoder.device,
        "batch_size": settings.encode_batch_size,
        "segments": info.segments_count,
        "indexed_vectors": info.indexed_vectors_count,
        "dense_hnsw": dense_hnsw_built(info.indexed_vectors_count, n),
        "raw_encode_s": raw_s,
        "raw_passages_per_s": n / raw_s,
        "platform_s": platform_s,
        "platform_passages_per_s": n / platform_s,
        "overhead": platform_s / raw_s - 1,
        "embed_vs_raw": stages.get("embed") / raw_s - 1,
        "stages_s": breakdown,
        "goal_overhead": OVERHEAD_GOAL,
        "pass": platform_s / raw_s - 1 <= OVERHEAD_GOAL,
    }


def print_index(result: dict[str, Any]) -> None:
    n, platform_s, raw_s = result["passages"], result["platform_s"], result["raw_encode_s"]
    table = Table(
        title=f"(a) Indexing {result['documents']} documents = {n} passages "
        f"(mean {result['mean_passage_tokens']:.0f} wordpieces), device {result['device']}"
    )
    for column in ("stage", "seconds", "% of platform", "passages/s"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, seconds in result["stages_s"].items():
        rate = f"{n / seconds:,.0f}" if seconds > 0 else "-"
        table.add_row(f"  {stage}", f"{seconds:.2f}", f"{100 * seconds / platform_s:.1f}", rate)
    table.add_row("platform: ingest + build + promote", f"{platform_s:.2f}", "100.0", f"{n / platform_s:,.1f}")
    table.add_row(
        "raw DualEncoder.encode_passages", f"{raw_s:.2f}", f"{100 * raw_s / platform_s:.1f}", f"{n / raw_s:,.1f}"
    )
    console.print(table)
    verdict = "PASS" if result["pass"] else "FAIL"
    console.print(
        f"  {verdict}  overhead = platform / raw encode - 1 = {100 * result['overhead']:+.1f} % "
        f"(goal <= {100 * OVERHEAD_GOAL:.0f} %); the platform's own embed step alone is "
        f"{100 * result['embed_vs_raw']:+.1f} % vs raw; collection: {result['segments']} segment(s), "
        f"dense HNSW graph built: {'yes' if result['dense_hnsw'] else 'no (below the indexing threshold: exact scan)'}"
    )


# -- (b) search latency --------------------------------------------------------------------------------------------
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

    from ferret.core.db.corpus import create_corpus, get_corpus
    from ferret.core.db.index_version import active_index_version, create_index_version
    from ferret.core.db.models import IndexState, utcnow
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.types import DENSE, IndexPoint, SearchRequest, point_id
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
        points = [
            IndexPoint(
                id=point_id(corpus.id, i + 1),
                dense=vectors[i],
                sparse=sparse[i],
                payload={
                    "passage_id": i + 1,
                    "document_id": i + 1,
                    "external_id": f"{s.dataset}:{s.doc_id}:{s.ordinal}",
                    "source": s.dataset,
                    "title": "",
                    "text": s.text,
                    "acl_groups": ["public"],
                    "metadata": {},
                },
            )
            for i, s in enumerate(sentences)
        ]
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
        result["dense_hnsw"] = dense_hnsw_built(info.indexed_vectors_count, len(texts))
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
    searchers = [Searcher(s, settings, backend) for s in searcher_sessions]
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
    finally:
        for s in searcher_sessions:
            s.close()
    result["latency"] = [asdict(x) for x in latencies]

    ratios: list[dict[str, Any]] = []
    for concurrency in CONCURRENCY:
        by_path = {x.path: x for x in latencies if x.concurrency == concurrency}
        platform = by_path["platform Searcher.search, dense"]
        raw, encoding = by_path["raw EdgeShard.query (vector given)"], by_path["query encoding alone"]
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
        f"finalize: optimize (HNSW) + flush: {result['segments']} segments, "
        f"dense HNSW {'built' if result['dense_hnsw'] else 'not built'}",
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
    note = "" if result["dense_hnsw"] else " (no dense HNSW graph: the collection is below the indexing threshold)"
    console.print(f"  {verdict}  recall@{TOP_K} at default ef >= {RECALL_GOAL}{note}")


# -- main ----------------------------------------------------------------------------------------------------------
def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="BEIR folder; repeatable")
    parser.add_argument("--part", choices=("both", "index", "search"), default="both")
    parser.add_argument("--index-docs", type=int, default=2000)
    parser.add_argument("--search-passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--hnsw-ef", type=int, action="append", default=None, help="default: 64, 128, 256")
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--home", type=Path, default=None, help="FERRET_HOME of the run; default: a temporary folder")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-speed-"))
    machine = machine_info()
    dirty = " (uncommitted changes)" if machine["dirty"] else ""
    console.print(
        f"machine: {machine['host']}, {machine['cpu']}, {machine['cpus']} cpus, {machine['memory_gib']} GiB, "
        f"load {machine['load_average']}; torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"cuda: {machine['cuda'] or 'none'}"
    )
    console.print(f"commit {machine['commit']}{dirty}; {machine['date']}; home {home}")
    if machine["load_average"][0] > 0.5 * (machine["cpus"] or 1):
        console.print("[yellow]the machine is busy (load average above half the cpus): timings will be noisy[/yellow]")
    report: dict[str, Any] = {"machine": machine, "args": {k: v for k, v in vars(args).items()}}
    app = open_platform(home)
    try:
        if args.part in ("both", "index"):
            started = time.perf_counter()
            report["index"] = index_benchmark(app, args.dataset, args.index_docs)
            report["index"]["wall_s"] = time.perf_counter() - started
            print_index(report["index"])
        if args.part in ("both", "search"):
            started = time.perf_counter()
            efs = args.hnsw_ef or [64, 128, 256]
            report["search"] = search_benchmark(app, args.dataset, args.search_passages, args.queries, args.cache, efs)
            report["search"]["wall_s"] = time.perf_counter() - started
            print_search(report["search"])
    finally:
        app.backend.close()
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    walls = ", ".join(f"{part} {report[part]['wall_s']:.0f} s" for part in ("index", "search") if part in report)
    console.print(f"wall time: {walls}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=_json_default))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
