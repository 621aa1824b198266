"""The 1M-passage table of benchmarks/million.py on the device machine (16 cores), with its base vectors embedded there.

The development box has 2 shared cores, on which an HNSW build over a million points does not fit a 10-minute job;
the device machine has 16 cores but no network, no datasets and no Qdrant Edge. So:

    # here: gpu_speed.py's bundle (MiniLM + the 100k benchmark sentences), plus the real queries and the wheels that
    # the device lacks (qdrant-edge-py, pydantic, pydantic-settings, SQLAlchemy ...: see the device README)
    python benchmarks/gpu_speed.py prepare ... --bundle .gpu16/bundle
    python benchmarks/gpu_million.py prepare --dataset ../shared/datasets/scifact --dataset ... --bundle .gpu16/bundle
    # there: embed the 100k sentences (fp16), return them int8 (gpu_speed.py's format), then million.py's variants
    python benchmarks/gpu_million.py run --stage embed --bundle .gpu16/bundle --out $OUT
    python benchmarks/gpu_million.py run --stage index --variant plain --bundle .gpu16/bundle --out $OUT & ...
    # here: the returned vectors become api_speed.py's embedding cache
    python benchmarks/gpu_speed.py unpack --returned DIR --bundle .gpu16/bundle --cache benchmarks/out

The rows are million.py's ``run_variant`` on Ferret's EdgeIndexBackend, exactly as on the CPU; only the base vectors
(GPU fp16 instead of CPU fp32 MiniLM) and the query vectors (the same fp16 model) are made differently. Each row is
appended to ``$OUT/million.jsonl`` as soon as it is measured, so a run cut by its time limit keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARDS = 3


def prepare(args: argparse.Namespace) -> None:
    from speed_support import dataset_queries

    queries = dataset_queries(args.dataset, args.queries)
    (args.bundle / "queries.json").write_text(json.dumps(queries))
    print(f"{len(queries)} queries in {args.bundle / 'queries.json'}")


def run(args: argparse.Namespace) -> None:
    import torch

    from ferret.core.encoder.dual_encoder import DualEncoder
    from ferret.core.index.edge_backend import EdgeIndexBackend
    from ferret.core.index.sparse import SparseEncoder
    from gpu_speed import restore_model
    from million import run_variant
    from speed_support import machine_info

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.home)
    work.mkdir(parents=True, exist_ok=True)
    with lzma.open(args.bundle / "sentences.txt.xz", "rt") as handle:
        texts = handle.read().split("\n")[: args.limit]
    if args.stage == "embed":
        model = str(restore_model(args.bundle, Path("/tmp/ferret-gpu-model")))
        encoder = DualEncoder.load(model, device=args.device, max_seq_length=258)
        started = time.perf_counter()
        base = encoder.encode_passages(texts, batch_size=256).astype(np.float32)
        seconds = time.perf_counter() - started
        scale = np.abs(base).max(axis=1, keepdims=True) / 127.0
        quantized = np.round(base / scale).astype(np.int8)
        for part, rows in enumerate(np.array_split(np.arange(len(texts)), SHARDS)):
            np.save(out / f"sentences-int8-{part}.npy", quantized[rows])
        np.save(out / "sentences-scale.npy", scale.astype(np.float32))
        gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (smoke run)"
        summary = {"gpu": gpu, "sentences": {"count": len(texts), "seconds": seconds}}
        (out / "gpu-speed.json").write_text(json.dumps(summary))
        queries = json.loads((args.bundle / "queries.json").read_text())[: args.queries]
        np.save(work / "base.npy", base)
        np.save(work / "queries.npy", encoder.encode_queries(queries))
        with (out / "million.jsonl").open("a") as handle:
            handle.write(json.dumps({"machine": machine_info(), **summary, "queries": len(queries)}) + "\n")
        print(json.dumps(summary), flush=True)
        return
    # stage "index": one process per variant, so the variants' single-threaded upserts run side by side
    queries = json.loads((args.bundle / "queries.json").read_text())[: args.queries]
    query_bm25 = SparseEncoder()
    data: dict[str, Any] = {
        "base": np.load(work / "base.npy"),
        "texts": texts,
        "sparse": SparseEncoder.for_wordpiece_length(32.0).embed_documents(texts),
        "queries": np.load(work / "queries.npy"),
        "query_sparse": [query_bm25.embed_query(q) for q in queries],
    }
    backend = EdgeIndexBackend(work / f"qdrant-{'-'.join(args.variant or ['plain'])}")
    try:
        for variant in args.variant or ["plain"]:
            row = run_variant(backend, "embedded", variant, args, data)
            with (out / "million.jsonl").open("a") as handle:
                handle.write(json.dumps(row) + "\n")
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("prepare")
    make.add_argument("--dataset", type=Path, action="append", required=True)
    make.add_argument("--queries", type=int, default=200)
    make.add_argument("--bundle", type=Path, required=True)
    there = commands.add_parser("run")
    there.add_argument("--bundle", type=Path, required=True)
    there.add_argument("--out", type=Path, required=True)
    there.add_argument("--home", default="/tmp/ferret-million")
    there.add_argument("--points", type=int, default=1_000_000)
    there.add_argument("--variant", action="append", choices=("plain", "int8", "int8-ondisk"), default=None)
    there.add_argument("--noise", type=float, default=0.01)
    there.add_argument("--chunk", type=int, default=20_000)
    there.add_argument("--keep", action="store_true")
    there.add_argument("--device", default="cuda")
    there.add_argument("--stage", choices=("embed", "index"), required=True)
    there.add_argument("--queries", type=int, default=200)
    there.add_argument("--limit", type=int, default=None, help="sentences and queries, for a smoke run")
    args = parser.parse_args()
    {"prepare": prepare, "run": run}[args.command](args)


if __name__ == "__main__":
    main()
