"""What the cross-encoder reranker costs per query on this machine (issue 12: p50 < 300 ms at the default depth).

Usage:
    python benchmarks/rerank_latency.py --dataset ../shared/datasets/scifact --reranker DIR \
        [--depths 10,20] [--lengths 128] [--variants torch,onnx,onnx-int8] [--ort-threads 1,2] [--queries 20] \
        [--threads 2] [--json OUT]

For each variant, each pair length (query + passage wordpieces; Ferret's default is ``MAX_PAIR_TOKENS``) and each
depth, it scores ``depth`` passages of the dataset for each of ``--queries`` test queries and prints wall p50/p99
and CPU-time p50 per query, with the load average before and after, since on a shared machine the wall time
measures the load as much as the model. Variants are what search serves for ``FERRET_RERANKER_RUNTIME``: ``torch``
(sentence-transformers in fp32 with ``--threads`` torch threads), ``onnx`` and ``onnx-int8`` (ONNX Runtime, the
export and int8 quantisation of ``rerank.onnx_reranker``), once per ``--ort-threads`` value (``0``: ONNX Runtime's
own pool, one thread per core, spin-waiting; ``N``: N threads that do not spin, as ``FERRET_RERANKER_THREADS=N``);
and ``torch-int8`` (PyTorch's dynamic quantisation of the linear layers; not served, for comparison). Passages are
drawn at random from the corpus (seeded): the cost depends on their length in wordpieces, and a first stage's top
documents are as long as any. The first two queries of each setting warm up and are not counted. For the other
variants it also reports how often their scores and torch's agree on the top passage and their rank correlation
over the same pairs (run ``torch`` first), so a speed-up that changes the ranking is visible.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's ρ without ties correction (scores are continuous)."""
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--reranker", type=Path, required=True)
    parser.add_argument("--depths", default="10,20")
    parser.add_argument("--lengths", default="128")
    parser.add_argument("--variants", default="torch,onnx,onnx-int8")
    parser.add_argument("--ort-threads", default="1,2")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - {"torch", "torch-int8", "onnx", "onnx-int8"}
    if unknown:  # the third session's names (fp32, int8) are not silently run as torch
        parser.error(f"unknown variants {sorted(unknown)}: use torch, torch-int8, onnx, onnx-int8")

    import torch

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.eval.beir import load_queries
    from ferret.core.rerank.cross_encoder import CrossScorer, Reranker, prepare_reranker
    from ferret.core.rerank.onnx_reranker import OnnxReranker, reranker_onnx_folder
    from ferret.core.settings import FerretSettings

    torch.set_num_threads(args.threads)
    with (args.dataset / "corpus.jsonl").open() as handle:
        documents = [json.loads(line) for line in handle]
    passages = [passage_text(d.get("title", ""), d.get("text", "")) for d in documents]
    rng = random.Random(args.seed)
    queries = rng.sample(sorted(load_queries(args.dataset).values()), args.queries + 2)
    depths = [int(d) for d in args.depths.split(",")]
    batches = [(query, rng.sample(passages, max(depths))) for query in queries]
    rows: list[dict[str, Any]] = []
    reference: dict[tuple[int, int, int], list[float]] = {}
    print(f"{args.dataset.name}: {os.cpu_count()} cpus, torch threads {args.threads}, load {os.getloadavg()}")
    home = Path(tempfile.mkdtemp(prefix="rerank-latency-"))
    settings = FerretSettings(home=home, onnx_cache=home / "onnx", reranker_runtime="onnx-int8")
    prepare_reranker(args.reranker, settings)  # the fp32 export and its int8 variant, as training makes them
    folder = reranker_onnx_folder(settings, args.reranker)

    def scorers(variant: str, length: int) -> list[tuple[str, CrossScorer]]:
        if variant.startswith("onnx"):
            found: list[tuple[str, CrossScorer]] = []
            for threads in (int(t) for t in args.ort_threads.split(",")):
                onnx = OnnxReranker.open(
                    folder, max_length=length, int8=variant == "onnx-int8", threads=threads or None
                )
                found.append((f"{variant} t={threads or 'auto'}", onnx))
            return found
        reranker = Reranker(args.reranker, name="latency")
        reranker.model.max_seq_length = length
        if variant == "torch-int8":
            # in place: sentence-transformers keeps its own reference to the transformer module
            torch.ao.quantization.quantize_dynamic(
                reranker.model.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
            )
        return [(variant, reranker)]

    for variant in args.variants.split(","):
        for length in (int(n) for n in args.lengths.split(",")):
            for label, reranker in scorers(variant, length):
                for depth in depths:
                    load_before = os.getloadavg()[0]
                    wall, cpu, agree, rho = [], [], [], []
                    for i, (query, texts) in enumerate(batches):
                        w0, c0 = time.perf_counter(), time.process_time()
                        scores = reranker.score(query, texts[:depth]).tolist()
                        w1, c1 = time.perf_counter(), time.process_time()
                        if i < 2:
                            continue
                        wall.append(1000 * (w1 - w0))
                        cpu.append(1000 * (c1 - c0))
                        key = (length, depth, i)
                        if variant == "torch":
                            reference[key] = scores
                        elif key in reference:
                            base = reference[key]
                            agree.append(float(base.index(max(base)) == scores.index(max(scores))))
                            rho.append(_rank_correlation(base, scores))
                    wall.sort()
                    row: dict[str, Any] = {
                        "variant": label, "max_tokens": length, "depth": depth, "queries": len(wall),
                        "wall_p50_ms": round(statistics.median(wall), 1),
                        "wall_p99_ms": round(wall[min(len(wall) - 1, int(0.99 * len(wall)))], 1),
                        "cpu_p50_ms": round(statistics.median(cpu), 1),
                        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                    }  # fmt: skip
                    if agree:
                        row["top1_agreement_with_torch"] = round(sum(agree) / len(agree), 3)
                        row["spearman_with_torch"] = round(statistics.mean(rho), 3)
                    rows.append(row)
                    print(row, flush=True)
    print(f"\n{'setting':30s} {'depth':>5s} {'queries':>7s} {'wall p50':>9s} {'wall p99':>9s} {'CPU p50':>8s}  "
          f"{'load':>9s}  {'top-1 = torch':>13s}  budget 300 ms")  # fmt: skip
    for row in rows:
        same = f"{row['top1_agreement_with_torch']:.2f}" if "top1_agreement_with_torch" in row else "-"
        print(
            f"{row['variant'] + ', ' + str(row['max_tokens']) + ' tokens':30s} {row['depth']:5d} {row['queries']:7d} "
            f"{row['wall_p50_ms']:7.0f}ms {row['wall_p99_ms']:7.0f}ms {row['cpu_p50_ms']:6.0f}ms  "
            f"{row['load_before']:4.1f}-{row['load_after']:<4.1f}  {same:>13s}  "
            f"{'within' if row['wall_p50_ms'] <= 300 else 'over'}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"dataset": args.dataset.name, "rows": rows}, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
