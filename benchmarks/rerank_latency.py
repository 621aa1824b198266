"""What the cross-encoder reranker costs per query on this machine (issue 12: p50 < 300 ms at the default depth).

Usage:
    python benchmarks/rerank_latency.py --dataset ../shared/datasets/scifact --reranker DIR \
        [--depths 10,20] [--lengths 256,128] [--variants fp32,int8,onnx-int8] [--queries 20] [--threads 2] [--json OUT]

For each variant (fp32 as trained; int8: PyTorch's dynamic quantisation of the linear layers; onnx-fp32 and
onnx-int8: the model exported to ONNX and run by ONNX Runtime, int8 by its dynamic quantisation), each pair length
(query + passage wordpieces; Ferret's default is ``MAX_PAIR_TOKENS``) and each depth, it scores ``depth`` passages of
the dataset for each of ``--queries`` test queries with Ferret's own ``Reranker.score`` and prints wall p50/p99 and
CPU-time p50 per query, with the load average before and after, since on a shared machine the wall time measures
the load as much as the model. Passages are drawn at random from the corpus (seeded): the cost depends on their
length in wordpieces, and a first stage's top documents are as long as any. The first two queries of each setting
warm up and are not counted. For int8 it also reports how often the int8 and fp32 scores agree on the top passage
and their rank correlation over the same pairs, so a speed-up that changes the ranking is visible.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's ρ without ties correction (scores are continuous)."""
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _onnx_scorer(folder: Path, variant: str, threads: int, work: Path) -> Callable[[str, list[str], int], list[float]]:
    """The reranker exported to ONNX (TorchScript exporter, opset 17), int8 by ONNX Runtime's dynamic quantisation
    for ``onnx-int8``, scored by ONNX Runtime's CPU provider with ``threads`` threads."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    exported = work / "reranker.onnx"
    if not exported.exists():
        model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32).eval()
        example = tokenizer(["query"] * 2, ["a passage"] * 2, padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        torch.onnx.export(
            model, tuple(example[n] for n in names), str(exported), input_names=names, output_names=["logits"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in names}, opset_version=17, dynamo=False,
        )  # fmt: skip
    target = exported
    if variant == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        target = work / "reranker-int8.onnx"
        if not target.exists():
            quantize_dynamic(str(exported), str(target), weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])

    def score(query: str, texts: list[str], length: int) -> list[float]:
        batch = tokenizer([query] * len(texts), texts, padding=True, truncation=True, max_length=length,
                          return_tensors="np")  # fmt: skip
        feeds = {i.name: np.asarray(batch[i.name], dtype=np.int64) for i in session.get_inputs()}
        return [float(x) for x in session.run(["logits"], feeds)[0].reshape(-1)]

    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--reranker", type=Path, required=True)
    parser.add_argument("--depths", default="10,20")
    parser.add_argument("--lengths", default="256,128")
    parser.add_argument("--variants", default="fp32,int8,onnx-int8")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.eval.beir import load_queries
    from ferret.core.rerank.cross_encoder import Reranker

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
    work = Path(tempfile.mkdtemp(prefix="rerank-onnx-"))
    for variant in args.variants.split(","):
        reranker = Reranker(args.reranker, name="latency")
        onnx = _onnx_scorer(args.reranker, variant, args.threads, work) if variant.startswith("onnx") else None
        if variant == "int8":
            # in place: sentence-transformers keeps its own reference to the transformer module
            torch.ao.quantization.quantize_dynamic(
                reranker.model.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
            )
        for length in (int(n) for n in args.lengths.split(",")):
            reranker.model.max_seq_length = length
            for depth in depths:
                load_before = os.getloadavg()[0]
                wall, cpu, agree, rho = [], [], [], []
                for i, (query, texts) in enumerate(batches):
                    w0, c0 = time.perf_counter(), time.process_time()
                    if onnx is not None:
                        scores = onnx(query, texts[:depth], length)
                    else:
                        scores = reranker.score(query, texts[:depth]).tolist()
                    w1, c1 = time.perf_counter(), time.process_time()
                    if i < 2:
                        continue
                    wall.append(1000 * (w1 - w0))
                    cpu.append(1000 * (c1 - c0))
                    key = (length, depth, i)
                    if variant == "fp32":
                        reference[key] = scores
                    elif key in reference:
                        base = reference[key]
                        agree.append(float(base.index(max(base)) == scores.index(max(scores))))
                        rho.append(_rank_correlation(base, scores))
                wall.sort()
                row: dict[str, Any] = {
                    "variant": variant, "max_tokens": length, "depth": depth, "queries": len(wall),
                    "wall_p50_ms": round(statistics.median(wall), 1),
                    "wall_p99_ms": round(wall[min(len(wall) - 1, int(0.99 * len(wall)))], 1),
                    "cpu_p50_ms": round(statistics.median(cpu), 1),
                    "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                }  # fmt: skip
                if agree:
                    row["top1_agreement_with_fp32"] = round(sum(agree) / len(agree), 3)
                    row["spearman_with_fp32"] = round(statistics.mean(rho), 3)
                rows.append(row)
                print(row, flush=True)
    print(f"\n{'setting':22s} {'depth':>5s} {'queries':>7s} {'wall p50':>9s} {'wall p99':>9s} {'CPU p50':>8s}  "
          f"{'load':>9s}  {'top-1 = fp32':>12s}  budget 300 ms")  # fmt: skip
    for row in rows:
        same = f"{row['top1_agreement_with_fp32']:.2f}" if "top1_agreement_with_fp32" in row else "-"
        print(
            f"{row['variant'] + ', ' + str(row['max_tokens']) + ' tokens':22s} {row['depth']:5d} {row['queries']:7d} "
            f"{row['wall_p50_ms']:7.0f}ms {row['wall_p99_ms']:7.0f}ms {row['cpu_p50_ms']:6.0f}ms  "
            f"{row['load_before']:4.1f}-{row['load_after']:<4.1f}  {same:>12s}  "
            f"{'within' if row['wall_p50_ms'] <= 300 else 'over'}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"dataset": args.dataset.name, "rows": rows}, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
