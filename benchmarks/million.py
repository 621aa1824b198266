"""A million passages on one machine (issue 16, item 3): build time, RAM, disk, dense and hybrid latency, recall@10
of HNSW against exact search, with and without scalar int8 quantisation and on-disk payloads.

Usage:
    python benchmarks/million.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        --dataset ../shared/datasets/squad-v1.1-dev --points 1000000 [--variant plain --variant int8 ...] \
        [--qdrant-url http://127.0.0.1:6333] [--json benchmarks/out/million.json]
    nice -n 10 python benchmarks/million.py ... --points 200000      # what fits in ~10 minutes on 2 shared cores

Vectors: the real MiniLM embeddings of the datasets' first 100k sentences (benchmarks/api_speed.py's cache under
--cache, computed on the CPU or brought back from the GPU by benchmarks/gpu_speed.py); point i gets sentence
i mod 100k's vector plus Gaussian noise of --noise per dimension, renormalised, and that sentence's BM25 vector
and text as payload. So beyond 100k the vectors are *perturbed copies* of real embeddings (near-duplicate
clusters of 10 at 1M), which makes HNSW's job harder than distinct passages would, not easier; the queries are
the datasets' real queries encoded by the base model. Recall@10 compares each query's HNSW top 10 with Qdrant's
exact (brute-force) top 10 over the same collection.

Backends: ``embedded`` (Qdrant Edge through Ferret's EdgeIndexBackend) always; ``server`` (qdrant-client through
QdrantServerBackend) only with --qdrant-url: no Qdrant server binary can be installed on the machine these
figures come from, so that row says "not run" there. Variants: ``plain`` (Ferret's collection as built today),
``int8`` (scalar int8 quantisation, quantile 0.99, rescored), ``int8-ondisk`` (int8 + payloads on disk).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from speed_support import console, corpus_sentences, dataset_queries, machine_info

BASE_SENTENCES = 100_000
TOP_K = 10


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rss_max_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def create_embedded(backend: Any, collection: str, dimension: int, variant: str) -> None:
    """Ferret's collection (EdgeIndexBackend.create_collection) with the variant's storage options."""
    import qdrant_edge as qe

    from ferret.core.index.backend import PAYLOAD_INTEGER_FIELDS, PAYLOAD_KEYWORD_FIELDS
    from ferret.core.index.types import DENSE, SPARSE

    if variant == "plain":
        backend.create_collection(collection, dimension)
        return
    quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True)
    config = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        quantization_config=quantization,
        on_disk_payload=variant == "int8-ondisk",
    )
    shard = qe.EdgeShard.create(str(backend.collections_dir / collection), config)
    for field in PAYLOAD_KEYWORD_FIELDS:
        shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
    for field in PAYLOAD_INTEGER_FIELDS:
        shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Integer))
    shard.close()


def create_server(backend: Any, collection: str, dimension: int, variant: str) -> None:
    from qdrant_client import models

    from ferret.core.index.backend import PAYLOAD_INTEGER_FIELDS, PAYLOAD_KEYWORD_FIELDS
    from ferret.core.index.types import DENSE, SPARSE

    if variant == "plain":
        backend.create_collection(collection, dimension)
        return
    backend.client.create_collection(
        collection,
        vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        quantization_config=models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99, always_ram=True)
        ),
        on_disk_payload=variant == "int8-ondisk",
    )
    for field in PAYLOAD_KEYWORD_FIELDS:
        backend.client.create_payload_index(collection, field, models.PayloadSchemaType.KEYWORD)
    for field in PAYLOAD_INTEGER_FIELDS:
        backend.client.create_payload_index(collection, field, models.PayloadSchemaType.INTEGER)


def points_of(
    start: int, stop: int, base: np.ndarray, texts: list[str], sparse: list[Any], noise: float, seed: int
) -> list[Any]:
    from ferret.core.index.types import IndexPoint, point_id

    rng = np.random.default_rng(seed + start)
    rows = np.arange(start, stop) % len(base)
    vectors = base[rows] + (rng.standard_normal((stop - start, base.shape[1])) * noise if noise else 0.0)
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    return [
        IndexPoint(
            id=point_id(1, i),
            dense=vectors[i - start],
            sparse=sparse[row],
            payload={
                "passage_id": i,
                "document_id": i,
                "external_id": str(i),
                "source": "bench",
                "title": "",
                "text": texts[row],
                "acl_groups": ["public"],
                "metadata": {},
            },
        )
        for i, row in zip(range(start, stop), rows, strict=True)
    ]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def run_variant(
    backend: Any, kind: str, variant: str, args: argparse.Namespace, data: dict[str, Any]
) -> dict[str, Any]:
    from ferret.core.index.types import SearchRequest

    rss_before = rss_now_mib()

    collection = f"million_{variant.replace('-', '_')}_{args.points}"
    backend.drop_collection(collection)
    (create_embedded if kind == "embedded" else create_server)(backend, collection, 384, variant)
    started = time.perf_counter()
    for start in range(0, args.points, args.chunk):
        stop = min(start + args.chunk, args.points)
        backend.upsert(collection, points_of(start, stop, data["base"], data["texts"], data["sparse"], args.noise, 13))
        console.print(f"[dim]{kind}/{variant}: {stop:,} points, {time.perf_counter() - started:.0f} s[/dim]")
    upsert_s = time.perf_counter() - started
    started = time.perf_counter()
    backend.finalize(collection)
    if kind == "server":  # the server indexes in the background: wait for green
        while str(backend.client.get_collection(collection).status).lower().endswith("yellow"):
            time.sleep(1)
    index_s = time.perf_counter() - started
    queries, query_sparse = data["queries"], data["query_sparse"]
    exact_top: list[list[str]] = []
    latencies: dict[str, list[float]] = {"dense": [], "hybrid": [], "exact": []}
    recall = []
    for i, vector in enumerate(queries):
        base: dict[str, Any] = {"limit": TOP_K, "dense": vector, "sparse": query_sparse[i], "acl_groups": ["public"]}
        for mode in ("dense", "hybrid"):
            began = time.perf_counter()
            hits = backend.search(collection, SearchRequest(mode=mode, **base))
            latencies[mode].append(time.perf_counter() - began)
            if mode == "dense":
                approximate = [hit.id for hit in hits]
        began = time.perf_counter()
        exact = [hit.id for hit in backend.search(collection, SearchRequest(mode="dense", exact=True, **base))]
        latencies["exact"].append(time.perf_counter() - began)
        exact_top.append(exact)
        recall.append(len(set(approximate) & set(exact)) / max(len(exact), 1))
    row: dict[str, Any] = {
        "backend": kind,
        "variant": variant,
        "points": args.points,
        "upsert_s": upsert_s,
        "index_s": index_s,
        "rss_before_mib": rss_before,
        "rss_now_mib": rss_now_mib(),
        "rss_max_mib": rss_max_mib(),
        "recall_at_10": float(np.mean(recall)),
        "load_1m": round(os.getloadavg()[0], 2),
    }
    if kind == "embedded":
        row["disk_mib"] = disk_bytes(backend.collections_dir / collection) / 2**20
    for mode, seconds in latencies.items():
        row.update({f"{mode}_{key}": value for key, value in percentiles(seconds).items()})
    console.print(json.dumps(row))
    if not args.keep:
        backend.drop_collection(collection)
    return row


def load_data(args: argparse.Namespace) -> dict[str, Any]:
    from ferret.core.encoder.registry import base_model_path, load_encoder
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.settings import FerretSettings

    model = base_model_path()
    names = "+".join(d.name for d in args.dataset)
    cache = args.cache / f"speed-sentences_{names}_{BASE_SENTENCES}_{Path(model).name}.npy"
    if not cache.is_file():
        raise SystemExit(f"{cache} is missing: run benchmarks/api_speed.py (or gpu_speed.py unpack) first")
    base = np.load(cache)
    texts = [s.text for s in corpus_sentences(args.dataset, BASE_SENTENCES)]
    sparse = SparseEncoder.for_wordpiece_length(32.0).embed_documents(texts)
    encoder = load_encoder(model, FerretSettings(home=Path(tempfile.gettempdir())))
    query_texts = dataset_queries(args.dataset, args.queries)
    query_bm25 = SparseEncoder()
    return {
        "base": base,
        "texts": texts,
        "sparse": sparse,
        "queries": encoder.encode_queries(query_texts),
        "query_sparse": [query_bm25.embed_query(q) for q in query_texts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, action="append", required=True)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--variant", action="append", choices=("plain", "int8", "int8-ondisk"), default=None)
    parser.add_argument("--noise", type=float, default=0.01, help="per-dimension Gaussian noise before renorm")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--qdrant-url", default=os.environ.get("FERRET_QDRANT_URL"))
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the collections")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    variants = args.variant or ["plain", "int8"]

    from ferret.core.index.edge_backend import EdgeIndexBackend

    result: dict[str, Any] = {"machine": machine_info(), "noise": args.noise, "queries": args.queries, "rows": []}
    data = load_data(args)
    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-million-"))
    embedded = EdgeIndexBackend(home / "qdrant")
    try:
        for variant in variants:
            result["rows"].append(run_variant(embedded, "embedded", variant, args, data))
    finally:
        embedded.close()
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    if args.qdrant_url:
        from qdrant_client import QdrantClient

        from ferret.core.index.server_backend import QdrantServerBackend

        server = QdrantServerBackend(QdrantClient(url=args.qdrant_url, timeout=600))
        try:
            for variant in variants:
                result["rows"].append(run_variant(server, "server", variant, args, data))
        finally:
            server.close()
    else:
        result["server"] = "not run: no --qdrant-url (FERRET_QDRANT_URL) given"
        console.print("[yellow]server backend not run: no Qdrant server URL[/yellow]")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
