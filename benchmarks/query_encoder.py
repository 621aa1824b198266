"""The query tower: torch against ONNX Runtime (fp32 and int8), for throughput and for ranking quality.

    python benchmarks/query_encoder.py --dataset ../shared/datasets/scifact [--threads 2] [--home DIR] [--no-ndcg]

throughput: queries/s of each tower on the dataset's queries at batch 1 (one search) and batch 16 (the query
micro-batcher under load), each on --threads cores (torch.set_num_threads; ONNX Runtime's intra-op pool), after a
warm-up, interleaved over --rounds rounds so a shared machine's load falls on each alike; the median round is
reported, with the cosine of each tower's vectors to torch's.

ndcg: Ferret's own evaluation (``ferret eval``: the dataset ingested into a corpus, indexed once by the torch tower)
searched in dense and hybrid mode with each query tower (``FERRET_QUERY_ENCODER``). Issue 16 admits int8 only if
its dense nDCG@10 stays within 0.2 points of torch's.

Cold start of a whole ``ferret search``: benchmarks/reliability.py startup. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

KINDS = ("torch", "onnx", "onnx-int8")


def dataset_queries(dataset: Path, count: int) -> list[str]:
    with (dataset / "queries.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for _, line in zip(range(count), lines, strict=False)]


def throughput(dataset: Path, home: Path, threads: int, rounds: int) -> list[dict[str, Any]]:
    import torch

    from ferret.core.encoder.onnx_query_encoder import OnnxQueryEncoder, export_onnx, onnx_folder
    from ferret.core.encoder.registry import base_model_path, load_encoder
    from ferret.core.settings import FerretSettings

    torch.set_num_threads(threads)
    settings = FerretSettings(home=home)
    path = base_model_path(settings)
    torch_encoder = load_encoder(path, settings)
    folder = export_onnx(torch_encoder, onnx_folder(settings, path), int8=True)
    towers: dict[str, Any] = {"torch": torch_encoder}
    for kind in ("onnx", "onnx-int8"):
        towers[kind] = OnnxQueryEncoder.open(
            folder, max_passage_tokens=settings.max_passage_tokens, int8=kind != "onnx", threads=threads
        )
    queries = dataset_queries(dataset, 320)
    reference = torch_encoder.encode_queries(queries)
    rows = []
    for batch, count in ((1, 96), (16, 320)):
        chunks = [queries[i : i + batch] for i in range(0, count, batch)]
        seconds: dict[str, list[float]] = {kind: [] for kind in towers}
        for tower in towers.values():
            tower.encode_queries(chunks[0], batch_size=batch)  # warm-up
        for _ in range(rounds):
            for kind, tower in towers.items():
                started = time.perf_counter()
                for chunk in chunks:
                    tower.encode_queries(chunk, batch_size=batch)
                seconds[kind].append(time.perf_counter() - started)
        for kind, tower in towers.items():
            cosine = np.sum(reference * tower.encode_queries(queries), axis=1)
            rows.append(
                {
                    "tower": kind,
                    "batch": batch,
                    "queries_per_s": round(count / statistics.median(seconds[kind]), 1),
                    "ms_per_call": round(1000 * statistics.median(seconds[kind]) / len(chunks), 2),
                    "cosine_to_torch_min": round(float(cosine.min()), 5),
                    "cosine_to_torch_mean": round(float(cosine.mean()), 5),
                }
            )
    return rows


def ndcg(dataset: Path, home: Path) -> list[dict[str, Any]]:
    from ferret.core.eval.evaluate import evaluate_dataset
    from ferret.core.settings import FerretSettings
    from ferret.runtime.context import app_context

    rows = []
    for kind in KINDS:
        settings = FerretSettings(home=home, query_encoder=kind)
        settings.ensure_home()
        with app_context(settings) as ctx:
            for row in evaluate_dataset(
                ctx.session,
                ctx.settings,
                ctx.backend,
                dataset,
                connectors=ctx.connectors,
                modes=("dense", "hybrid"),
                status=lambda message: print(f"  {message}", flush=True),
            ):
                if row.system == "ferret":
                    rows.append({"tower": kind, "mode": row.mode, "nDCG@10": round(row.metrics["ndcg@10"], 2)})
        print(rows[-2:], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="BEIR folder, e.g. ../shared/datasets/scifact")
    parser.add_argument("--home", type=Path, default=None, help="FERRET_HOME (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-ndcg", action="store_true", help="throughput only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferret-query-encoder-") as tmp:
        home = args.home or Path(tmp)
        os.environ["FERRET_HOME"] = str(home)
        print({"load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "threads": args.threads})
        for row in throughput(args.dataset, home, args.threads, args.rounds):
            print(row, flush=True)
        if not args.no_ndcg:
            for row in ndcg(args.dataset, home):
                print(row)
        print({"load_average_1min_after": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
