"""The cross-encoder reranker on ONNX Runtime: scores equal to the torch model's, without torch at search time.

Issue 12 item 3 asks a reranked query to cost under 300 ms p50 on 2 CPU cores at the default depth. The served
sentence-transformers ``CrossEncoder`` in torch fp32 took 463 ms at depth 10 and 128 wordpieces on idle cores; the
same model on ONNX Runtime with int8 weights 137 ms (benchmarks/RESULTS.md, issue 12). The export shares the query
tower's cache, atomic write and int8 quantisation (``ferret.core.encoder.onnx_export``), in a folder of its own
(``reranker-<fingerprint>``).

What sentence-transformers does around the classifier is reproduced from what its loader read, recorded in
``pipeline.json``: the pair tokenisation (the backend ``tokenizer.json``; truncation "longest first" to the served
length, as ``CrossEncoder.predict`` tokenises pairs) and the activation on the logit (sigmoid for one label unless
the model says otherwise). The activation matters: search fuses min-max normalised scores
(``cross_encoder.fused_scores``), and a min-max of sigmoids is not a min-max of logits. A model with any other module
or activation is not exported; torch serves it.

Example:
    >>> folder = export_reranker(Reranker(path).model, reranker_onnx_folder(settings, path))
    >>> OnnxReranker.open(folder, max_length=128).score("aspirin", ["Aspirin inhibits COX.", "Paris."]).shape
    (2,)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ferret.core.encoder.onnx_export import (
    OnnxUnavailableError,
    model_fingerprint,
    onnx_cache_root,
    padded_batches,
    read_export,
    set_tokenizer_lengths,
    write_export,
)
from ferret.core.settings import FerretSettings

EXPORT_FORMAT = 1
"""Bumped when what is written changes, so older cache folders are not read."""
PIPELINE_FILE = "reranker.json"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity"}


def reranker_onnx_folder(settings: FerretSettings, model_path: str | Path) -> Path:
    """Where the export of the reranker folder's current files lives (it may not exist yet)."""
    return onnx_cache_root(settings) / f"reranker-{model_fingerprint(model_path, f'reranker {EXPORT_FORMAT}')}"


@dataclass(frozen=True)
class RerankerPipeline:
    """What ``CrossEncoder.predict`` does around the classifier, as its loader read it from the model folder."""

    format: int
    inputs: list[str]
    activation: str
    pad_id: int
    pad_token: str
    pad_type_id: int


def _pipeline_of(model: Any) -> RerankerPipeline:
    """The pipeline of a loaded sentence-transformers ``CrossEncoder``; ``OnnxUnavailableError`` for any part not
    reproduced."""
    names = [type(module).__name__ for module in model]
    if names != ["Transformer"] or getattr(model[0], "transformer_task", "") != "sequence-classification":
        raise OnnxUnavailableError(f"modules {names} (only one sequence-classification Transformer is exported)")
    if model.num_labels != 1:
        raise OnnxUnavailableError(f"{model.num_labels} labels (a reranker has one)")
    activation = _ACTIVATIONS.get(type(model.activation_fn).__name__)
    if activation is None:
        raise OnnxUnavailableError(f"activation {model.activation_fn!r}")
    tokenizer = model.tokenizer
    if getattr(tokenizer, "backend_tokenizer", None) is None or tokenizer.padding_side != "right":
        raise OnnxUnavailableError("a tokenizer without a right-padding tokenizers backend")
    inputs = [name for name in _INPUTS if name in tokenizer.model_input_names]
    if inputs[:2] != ["input_ids", "attention_mask"]:
        raise OnnxUnavailableError(f"model inputs {tokenizer.model_input_names}")
    return RerankerPipeline(
        format=EXPORT_FORMAT,
        inputs=inputs,
        activation=activation,
        pad_id=int(tokenizer.pad_token_id or 0),
        pad_token=str(tokenizer.pad_token),
        pad_type_id=int(getattr(tokenizer, "pad_token_type_id", 0) or 0),
    )


def export_reranker(model: Any, folder: Path, *, int8: bool = False) -> Path:
    """Export a loaded ``CrossEncoder``'s classifier (``Reranker.model``; fp32, on CPU) with its pipeline and tokenizer
    into ``folder``, atomically (``onnx_export.staging_folder``); its int8 variant too for ``int8``. Raises
    ``OnnxUnavailableError`` when the model cannot be exported (the reason is kept in ``export-failed.txt``, so it is
    not tried again)."""
    return write_export(
        folder,
        describe=lambda: _pipeline_of(model),
        network=model.model,
        tokenizer=model.tokenizer,
        example=model.tokenizer(["a query", "a second query"], ["a passage", "a longer second passage"], padding=True),
        output="logits",
        pipeline_file=PIPELINE_FILE,
        int8=int8,
    )


class OnnxReranker:
    """Scores (query, passage) pairs as ``Reranker.score`` does, with ONNX Runtime and ``tokenizers``."""

    def __init__(self, session: Any, tokenizer: Any, pipeline: RerankerPipeline, *, name: str, runtime: str) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.pipeline = pipeline
        self.name = name
        self.runtime = runtime
        """``onnx`` or ``onnx-int8``, as ``FERRET_RERANKER_RUNTIME`` names them."""

    @classmethod
    def open(
        cls, folder: Path, *, max_length: int, int8: bool = False, threads: int | None = None, name: str = ""
    ) -> OnnxReranker:
        """Load an export; ``OnnxUnavailableError`` if it is missing, unreadable or of another format. ``threads``
        as in ``onnx_export.open_session``; ``max_length``: query + passage wordpieces read per pair."""
        pipeline, tokenizer, session = read_export(
            folder,
            pipeline_type=RerankerPipeline,
            pipeline_file=PIPELINE_FILE,
            export_format=EXPORT_FORMAT,
            int8=int8,
            threads=threads,
        )
        set_tokenizer_lengths(tokenizer, pipeline, max_length)
        return cls(session, tokenizer, pipeline, name=name or folder.name, runtime="onnx-int8" if int8 else "onnx")

    def score(self, query: str, passages: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        scores = np.zeros(len(passages), dtype=np.float32)
        for rows, features in padded_batches(self._tokenizer, [(query, passage) for passage in passages], batch_size):
            scores[rows] = self._score_rows(features)
        return scores

    def _score_rows(self, features: dict[str, np.ndarray]) -> np.ndarray:
        (logits,) = self._session.run(["logits"], {name: features[name] for name in self.pipeline.inputs})
        values = np.asarray(logits, dtype=np.float64).reshape(-1)
        if self.pipeline.activation == "sigmoid":
            values = 1.0 / (1.0 + np.exp(-values))
        return values.astype(np.float32)
