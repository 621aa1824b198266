"""A cross-encoder reranker and how its score is fused with the first stage's.

Promptagator++ (Dai et al. 2022, §3.4) reranks the retriever's top documents with a cross-encoder trained on the
same synthetic pairs. Ferret's cross-encoder starts from the base MiniLM's transformer (no trained cross-encoder
ships as a package; MODELS.md) and learns from a few hundred pairs, so its score alone is noisy: it is fused with
the first stage's score instead of replacing it. Both are min-max normalised over the reranked documents of the
query and combined ``w·φ(cross) + (1−w)·φ(first)``; documents below the depth keep their first-stage order.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ferret.core.corpus.chunking import passage_text
from ferret.core.errors import ConflictError

MAX_PAIR_TOKENS = 128
"""Query + passage wordpieces the cross-encoder reads. The cost of a pair grows with it: 128 takes 0.56–0.68 of
256's CPU time, and on SciFact's test split (H100 scores of the same reranker) it changes the best fused nDCG@10 by
−0.2 at depth 10 and +0.5 at depth 20 (benchmarks/RESULTS.md, issue 12, third session). Training reads 256."""

_CACHE: dict[str, Reranker] = {}
_LOCK = threading.Lock()


class Rerankable(Protocol):
    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def score(self) -> float: ...


R = TypeVar("R", bound=Rerankable)


class Reranker:
    """A sentence-transformers CrossEncoder with one output (a relevance logit)."""

    def __init__(self, path: str | Path, *, name: str = "", threads: int | None = None) -> None:
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise ConflictError(f"The files of reranker {name or folder.name!r} are missing from {folder}.")
        import torch
        from sentence_transformers import CrossEncoder

        if threads:
            torch.set_num_threads(threads)
        self.name = name or folder.name
        self.model = CrossEncoder(str(folder), num_labels=1, max_length=MAX_PAIR_TOKENS, device="cpu")
        self.model.model.float().eval()  # weights may travel in fp16; CPU inference runs in fp32

    def score(self, query: str, passages: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        pairs = [(query, passage) for passage in passages]
        scores = self.model.predict(pairs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(-1)


def load_reranker(path: str | Path, *, name: str = "") -> Reranker:
    """One loaded reranker per folder and process (the hot path loads nothing twice)."""
    key = str(path)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = Reranker(path, name=name)
        return found


def _minmax(values: np.ndarray) -> np.ndarray:
    span = float(values.max() - values.min()) if len(values) else 0.0
    return np.ones_like(values) if span <= 0 else (values - values.min()) / span


def fused_scores(first: np.ndarray, cross: np.ndarray, weight: float) -> np.ndarray:
    """w·φ(cross) + (1−w)·φ(first), φ = min-max over the reranked documents of one query."""
    return weight * _minmax(np.asarray(cross, dtype=np.float64)) + (1 - weight) * _minmax(
        np.asarray(first, dtype=np.float64)
    )


def rerank(query: str, results: Sequence[R], reranker: Reranker, *, depth: int, weight: float) -> list[R]:
    """The first ``depth`` results reordered by the fused score (ties keep first-stage order), then the rest.

    Scores stay decreasing down the list (evaluation sorts by them): the reranked ones get 1 + fused score, those
    below the depth a rank-based score in (0, 1) that keeps their first-stage order."""
    head, tail = list(results[:depth]), list(results[depth:])
    if len(head) < 2:
        return [*head, *tail]
    cross = reranker.score(query, [passage_text(r.title, r.text) for r in head])
    fused = fused_scores(np.array([r.score for r in head]), cross, weight)
    order = sorted(range(len(head)), key=lambda i: (-fused[i], i))
    reordered: list[Any] = [replace(head[i], score=1.0 + float(fused[i])) for i in order]  # type: ignore[type-var]
    below = [replace(r, score=1.0 - (j + 1) / (len(tail) + 1)) for j, r in enumerate(tail)]  # type: ignore[type-var]
    return [*reordered, *below]
