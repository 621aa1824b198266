"""Shared parts of benchmarks/speed.py: machine facts, timing helpers, sentence corpora, the platform."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from rich.console import Console

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


def measure_interleaved(
    calls: dict[str, Callable[[int, int], object]], requests: int, *, warmup: int = WARMUP_CALLS
) -> dict[str, Latency]:
    """One caller; the paths take turns query by query (their order rotating), so a change in machine load hits
    them alike. Timed one after another, a path measured during a busy minute looks slower than its parts."""
    names = list(calls)
    for i in range(min(warmup, requests)):
        for name in names:
            calls[name](0, i)
    seconds = {name: np.zeros(requests) for name in names}
    for i in range(requests):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            began = time.perf_counter()
            calls[name](0, i)
            seconds[name][i] = time.perf_counter() - began
    result = {}
    for name, values in seconds.items():
        ms = values * 1000
        p50, p99 = np.percentile(ms, [50, 99])
        result[name] = Latency(
            f"{name} (interleaved)", 1, requests, float(p50), float(p99), float(ms.mean()), requests / values.sum()
        )
    return result


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
    from ferret.core.eval.beir import iter_corpus

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
    from ferret.core.eval.beir import load_queries

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
    from ferret.core.index.edge_backend import EdgeIndexBackend
    from ferret.core.settings import FerretSettings
    from ferret.runtime.context import ensure_schema

    settings = FerretSettings(home=home, qdrant_url=None)
    settings.ensure_home()
    ensure_schema(settings)
    return Platform(settings, EdgeIndexBackend(settings.qdrant_path))


def open_session(settings: FerretSettings) -> Session:
    from sqlalchemy.orm import sessionmaker

    from ferret.core.db.engine import get_engine

    return sessionmaker(get_engine(settings.database_url), expire_on_commit=False)()


def indexed_vectors_note(indexed_vectors: int, points: int) -> str:
    """What Qdrant's shard info says, as it says it: its count of indexed vectors spans the dense and the sparse
    vectors, so it cannot tell alone whether the dense HNSW graph exists (compare the HNSW and exact=True rows)."""
    return f"{indexed_vectors:,} indexed vectors for {points:,} points"


# -- (a) indexing throughput ---------------------------------------------------------------------------------------
def first_documents_connector(datasets: Sequence[Path], limit: int) -> Any:
    """A BEIR connector over the first ``limit`` documents of the datasets, one source named ``beir``."""
    from ferret.connectors.beir.connector import BeirConnector
    from ferret.core.sources.capabilities import ConnectorOutput

    class FirstDocuments(BeirConnector):
        def load_from_source(self) -> ConnectorOutput:
            def documents() -> ConnectorOutput:
                for dataset in datasets:
                    yield from BeirConnector(path=str(dataset), name=self.source_name).load_from_source()

            return islice(documents(), limit)

    return FirstDocuments(path=str(datasets[0]), name="beir")


def sentence_points(corpus_id: int, sentences: Sequence[Sentence], vectors: Any, sparse: Sequence[Any]) -> list[Any]:
    """Index points for benchmark sentences: one public passage per sentence, ids 1..N."""
    from ferret.core.index.types import IndexPoint, point_id

    return [
        IndexPoint(
            id=point_id(corpus_id, i + 1),
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
