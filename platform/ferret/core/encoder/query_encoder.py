"""The query tower a search uses: ONNX Runtime when the model's export is there, torch otherwise.

``FERRET_QUERY_ENCODER`` picks it: ``onnx`` (the default, chosen by measurement: benchmarks/RESULTS.md, "Query
encoder"), ``onnx-int8`` or ``torch``. The export is made when an index is built with a model
(``prepare_query_encoder``), so a cold search pays neither the export nor torch's import. When the export is
missing, unreadable or impossible, or onnxruntime is not installed, the search is served by torch and one line says
why, once per process and model; a missing or corrupt export is then written again from the loaded torch model, so
the next process finds it. A CUDA device (``FERRET_DEVICE=cuda...``) always encodes with torch on the GPU.

Example:
    >>> encoder = query_encoder(model.path, settings)  # OnnxQueryEncoder or DualEncoder
    >>> encoder.encode_queries(["parental leave"]).shape
    (1, 384)
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ferret.core.encoder.onnx_query_encoder import (
    FAILED_FILE,
    OnnxQueryEncoder,
    OnnxUnavailableError,
    export_onnx,
    onnx_folder,
)
from ferret.core.encoder.registry import load_encoder
from ferret.core.settings import FerretSettings

logger = logging.getLogger(__name__)


class QueryEncoder(Protocol):
    """What the searcher needs of a query tower; ``DualEncoder`` and ``OnnxQueryEncoder`` both are one."""

    calls: int

    @property
    def dimension(self) -> int: ...

    def encode_queries(self, queries: Sequence[str], *, batch_size: int = 64) -> np.ndarray: ...


_cache: dict[tuple[str, str, int, int], QueryEncoder] = {}
_lock = threading.Lock()


def uses_onnx(settings: FerretSettings) -> bool:
    return settings.query_encoder != "torch" and not (settings.device or "").startswith("cuda")


def query_encoder(path: str | Path, settings: FerretSettings) -> QueryEncoder:
    """The query tower of a model folder, loaded once per process (the key includes what changes its output)."""
    if not uses_onnx(settings):
        return load_encoder(path, settings)
    key = (str(path), settings.query_encoder, settings.max_passage_tokens, settings.query_encoder_threads)
    with _lock:
        encoder = _cache.get(key)
        if encoder is None:
            encoder = _open_or_fall_back(Path(path), settings)
            _cache[key] = encoder
        return encoder


def forget_query_encoders() -> None:
    """Drop the query towers this process keeps (the next call reads the cache again), as a new process would."""
    with _lock:
        _cache.clear()


def _open_or_fall_back(path: Path, settings: FerretSettings) -> QueryEncoder:
    folder = onnx_folder(settings, path)
    int8 = settings.query_encoder == "onnx-int8"
    try:
        return OnnxQueryEncoder.open(
            folder,
            max_passage_tokens=settings.max_passage_tokens,
            int8=int8,
            threads=settings.query_encoder_threads or None,
        )
    except OnnxUnavailableError as reason:
        unsupported = (folder / FAILED_FILE).is_file()  # a permanent state, not worth a line on every search
        logger.log(
            logging.INFO if unsupported else logging.WARNING,
            "Queries for model %s are encoded with torch: its ONNX export is unusable (%s); it is written again.",
            path.name,
            reason,
        )
        rebuild = folder.is_dir() and not unsupported
    encoder = load_encoder(path, settings)
    if rebuild:  # a corrupt export: remove it, so that it is written again below
        shutil.rmtree(folder, ignore_errors=True)
    try:
        export_onnx(encoder, folder, int8=int8)
    except Exception as error:  # the search is served either way; the reason is kept in the log
        logger.info("ONNX export of %s failed: %s", path, error)
    return encoder


def prepare_query_encoder(path: str | Path, settings: FerretSettings) -> None:
    """Export a model's query tower to ONNX if the settings use it and it is not there yet (index builds call this).

    A model that cannot be exported is logged and left to torch: building its index must not fail for it."""
    if not uses_onnx(settings):
        return
    folder = onnx_folder(settings, path)
    int8 = settings.query_encoder == "onnx-int8"
    if (folder / FAILED_FILE).is_file() or ((folder / "model.onnx").is_file() and not int8):
        return
    try:
        export_onnx(load_encoder(path, settings), folder, int8=int8)
    except Exception as error:
        logger.warning("Searches with model %s will encode queries with torch: no ONNX export (%s).", path, error)
