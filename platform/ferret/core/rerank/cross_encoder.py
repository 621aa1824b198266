"""A cross-encoder reranker and how its score is fused with the first stage's.

Promptagator++ (Dai et al. 2022, §3.4) reranks the retriever's top documents with a cross-encoder trained on the
same synthetic pairs. Ferret's cross-encoder starts from the base MiniLM's transformer (no trained cross-encoder
ships as a package; MODELS.md) and learns from a few hundred pairs, so its score alone is noisy: it is fused with
the first stage's score instead of replacing it. Both are min-max normalised over the reranked documents of the
query and combined ``w·φ(cross) + (1−w)·φ(first)``; documents below the depth keep their first-stage order.

Searches score pairs with ONNX Runtime (``FERRET_RERANKER_RUNTIME``: ``onnx-int8`` by default, ``onnx`` or ``torch``;
``ferret.core.rerank.onnx_reranker``), the export made when a reranker is trained (``prepare_reranker``). When the
export is missing, unreadable or impossible, or onnxruntime is not installed, the torch model serves this process and
one line says why, once per process and reranker; a missing or corrupt export is then written again from the loaded
torch model, so the next process finds it.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ferret.core.corpus.chunking import passage_text
from ferret.core.encoder.onnx_export import FAILED_FILE, MODEL_FILE, OnnxUnavailableError, quantize_int8
from ferret.core.errors import ConflictError
from ferret.core.rerank.onnx_reranker import OnnxReranker, export_reranker, reranker_onnx_folder
from ferret.core.rerank.training import MAX_PAIR_TOKENS
from ferret.core.settings import FerretSettings, get_settings

logger = logging.getLogger(__name__)

_CACHE: dict[tuple[str, str, int, str | None], CrossScorer] = {}
_LOCK = threading.Lock()
CROSS_ENCODER_KIND = "cross_encoder"
"""``ModelVersion.kind`` of a trained reranker (a dual encoder's is ``dual_encoder``)."""


class CrossScorer(Protocol):
    """What search needs of a reranker; the torch ``Reranker`` and ``OnnxReranker`` both are one."""

    name: str
    runtime: str
    """``torch``, ``onnx`` or ``onnx-int8``: what scores the pairs."""

    def score(self, query: str, passages: Sequence[str], *, batch_size: int = 32) -> np.ndarray: ...


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

    def __init__(self, path: str | Path, *, name: str = "", threads: int | None = None, device: str = "cpu") -> None:
        folder = Path(path)
        _check_files(folder, name)
        import torch
        from sentence_transformers import CrossEncoder

        if threads:
            torch.set_num_threads(threads)
        self.name = name or folder.name
        self.runtime = "torch"
        self.model = CrossEncoder(str(folder), num_labels=1, max_length=MAX_PAIR_TOKENS, device=device)
        if device.startswith("cuda"):
            self.model.model.half().eval()  # a GPU scores in fp16 (the scores of benchmarks/rerank_gpu.py)
        else:
            self.model.model.float().eval()  # weights may travel in fp16; CPU inference runs in fp32

    def score(self, query: str, passages: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        pairs = [(query, passage) for passage in passages]
        scores = self.model.predict(pairs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(-1)


def _check_files(folder: Path, name: str) -> None:
    if not (folder / "config.json").is_file():
        raise ConflictError(f"The files of reranker {name or folder.name!r} are missing from {folder}.")


def load_reranker(path: str | Path, *, name: str = "", settings: FerretSettings | None = None) -> CrossScorer:
    """The reranker of a model folder as the settings serve it, loaded once per process (the hot path loads nothing
    twice). Missing files are a one-sentence ``ConflictError`` naming the reranker, whatever the runtime."""
    settings = settings or get_settings()
    _check_files(Path(path), name)
    key = (str(path), settings.reranker_runtime, settings.reranker_threads, settings.device)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = _open_or_fall_back(Path(path), name, settings)
        return found


def forget_rerankers() -> None:
    """Drop the rerankers this process keeps (the next call reads the cache again), as a new process would."""
    with _LOCK:
        _CACHE.clear()


def _open_or_fall_back(path: Path, name: str, settings: FerretSettings) -> CrossScorer:
    if (settings.device or "").startswith("cuda"):  # as the query encoder: a CUDA device scores with torch on it
        return Reranker(path, name=name, device=str(settings.device))
    if settings.reranker_runtime == "torch":
        return Reranker(path, name=name)
    folder = reranker_onnx_folder(settings, path)
    int8 = settings.reranker_runtime == "onnx-int8"
    try:
        return OnnxReranker.open(
            folder, max_length=MAX_PAIR_TOKENS, int8=int8, threads=settings.reranker_threads or None, name=name
        )
    except OnnxUnavailableError as reason:
        unsupported = (folder / FAILED_FILE).is_file()  # a permanent state, not worth a warning on every start
        logger.log(
            logging.INFO if unsupported else logging.WARNING,
            "Reranker %s scores with torch: its ONNX export is unusable (%s); it is written again.",
            name or path.name,
            reason,
        )
        rebuild = folder.is_dir() and not unsupported
    reranker = Reranker(path, name=name)
    if rebuild:  # a corrupt export: remove it, so that it is written again below
        shutil.rmtree(folder, ignore_errors=True)
    try:
        export_reranker(reranker.model, folder, int8=int8)
    except Exception as error:  # the search is served either way; the reason is kept in the log
        logger.info("ONNX export of reranker %s failed: %s", path, error)
    return reranker


def prepare_reranker(path: str | Path, settings: FerretSettings) -> None:
    """Export a reranker to ONNX if the settings use it and it is not there yet (training calls this), so that no
    search pays the export. A reranker that cannot be exported is logged and left to torch."""
    if settings.reranker_runtime == "torch":
        return
    folder = reranker_onnx_folder(settings, path)
    int8 = settings.reranker_runtime == "onnx-int8"
    if (folder / FAILED_FILE).is_file():
        return
    try:
        if (folder / MODEL_FILE).is_file():
            if int8:
                quantize_int8(folder)
            return
        export_reranker(Reranker(path).model, folder, int8=int8)
    except Exception as error:
        logger.warning("Reranker %s will score with torch: no ONNX export (%s).", path, error)


def _minmax(values: np.ndarray) -> np.ndarray:
    span = float(values.max() - values.min()) if len(values) else 0.0
    return np.ones_like(values) if span <= 0 else (values - values.min()) / span


def fused_scores(first: np.ndarray, cross: np.ndarray, weight: float) -> np.ndarray:
    """w·φ(cross) + (1−w)·φ(first), φ = min-max over the reranked documents of one query."""
    return weight * _minmax(np.asarray(cross, dtype=np.float64)) + (1 - weight) * _minmax(
        np.asarray(first, dtype=np.float64)
    )


def rerank(query: str, results: Sequence[R], reranker: CrossScorer, *, depth: int, weight: float) -> list[R]:
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
