"""A query tower on ONNX Runtime: the served model's transformer, exported once, run without torch at search time.

A cold hybrid ``ferret search`` used to spend most of its 8 s importing torch and sentence-transformers to encode
one query (issue 11, item 9). The transformer of a model version is exported to ONNX once, when an index is built
with it, into ``FERRET_ONNX_CACHE`` (default ``FERRET_HOME/cache/onnx``), in a folder named by the fingerprint of the
model folder's files. A search then needs only ``onnxruntime``, the ``tokenizers`` library and numpy.

What sentence-transformers does around the transformer is reproduced here from what its own loader read from the
model folder, recorded in ``pipeline.json`` at export: the tokenizer (its backend ``tokenizer.json``, lower-casing
included), the default prompt, the truncation length Ferret serves the model with, the pooling modes (CLS, mean,
max, mean/sqrt(len)) with the prompt excluded when the pooling config says so, and the final L2 normalisation. A model
with any other module (a Dense layer, weighted-mean or last-token pooling) is not exported: it is served by torch.
The optional int8 variant is ONNX Runtime's dynamic quantisation of the weights (``quantize_dynamic``); its ranking
cost is measured in benchmarks/RESULTS.md (issue 16) before it may be chosen.

Example:
    >>> folder = export_onnx(load_encoder(path, settings), onnx_folder(settings, path))
    >>> OnnxQueryEncoder.open(folder, max_passage_tokens=288).encode_queries(["parental leave"]).shape
    (1, 384)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ferret.core.encoder.onnx_export import (
    FAILED_FILE,
    INT8_FILE,
    MODEL_FILE,
    OnnxUnavailableError,
    onnx_cache_root,
    padded_batches,
    quantize_int8,
    read_export,
    served_max_seq_length,
    set_tokenizer_lengths,
    write_export,
)
from ferret.core.encoder.onnx_export import model_fingerprint as _fingerprint
from ferret.core.settings import FerretSettings

if TYPE_CHECKING:
    from ferret.core.encoder.dual_encoder import DualEncoder

__all__ = [
    "FAILED_FILE",
    "INT8_FILE",
    "MODEL_FILE",
    "OnnxQueryEncoder",
    "OnnxUnavailableError",
    "export_onnx",
    "model_fingerprint",
    "onnx_cache_root",
    "onnx_folder",
    "quantize_int8",
]

EXPORT_FORMAT = 1
"""Bumped when what is written changes, so older cache folders are not read."""
PIPELINE_FILE = "pipeline.json"
_POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens")
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_fingerprint(model_path: str | Path) -> str:
    """The cache key of a dual encoder's folder (``onnx_export.model_fingerprint``)."""
    return _fingerprint(model_path, f"format {EXPORT_FORMAT}")


def onnx_folder(settings: FerretSettings, model_path: str | Path) -> Path:
    """Where the export of the model folder's current files lives (it may not exist yet)."""
    return onnx_cache_root(settings) / model_fingerprint(model_path)


@dataclass(frozen=True)
class ExportedPipeline:
    """What sentence-transformers does around the transformer, as its loader read it from the model folder."""

    format: int
    inputs: list[str]
    pooling: list[str]
    include_prompt: bool
    prompt: str
    prompt_length: int
    do_lower_case: bool
    native_max_seq_length: int
    max_position_embeddings: int
    pad_id: int
    pad_token: str
    pad_type_id: int
    dimension: int


def _pipeline_of(encoder: DualEncoder) -> ExportedPipeline:
    """The pipeline of a loaded sentence-transformers model; ``OnnxUnavailableError`` for any part not reproduced."""
    model: Any = encoder.model
    names = [type(module).__name__ for module in model]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise OnnxUnavailableError(f"modules {names} (only Transformer, Pooling and Normalize are exported)")
    transformer, pooling = model[0], model[1]
    if getattr(transformer, "transformer_task", "feature-extraction") != "feature-extraction":
        raise OnnxUnavailableError(f"transformer task {transformer.transformer_task!r}")
    modes = pooling.pooling_mode if hasattr(pooling, "pooling_mode") else pooling.get_pooling_mode_str().split("+")
    modes = [modes] if isinstance(modes, str) else list(modes)
    if not modes or any(mode not in _POOLING_MODES for mode in modes):
        raise OnnxUnavailableError(f"pooling {modes}")
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "padding_side", "right") != "right":
        raise OnnxUnavailableError("a tokenizer without a right-padding tokenizers backend")
    inputs = [name for name in _INPUTS if name in tokenizer.model_input_names]
    if inputs[:2] != ["input_ids", "attention_mask"]:
        raise OnnxUnavailableError(f"model inputs {tokenizer.model_input_names}")
    prompt = (model.prompts or {}).get(model.default_prompt_name or "", "") or ""
    prompt_length = 0
    if prompt:
        ids = tokenizer(prompt)["input_ids"]
        prompt_length = len(ids) - (1 if ids and ids[-1] in tokenizer.all_special_ids else 0)
    config = transformer.auto_model.config
    return ExportedPipeline(
        format=EXPORT_FORMAT,
        inputs=inputs,
        pooling=modes,
        include_prompt=bool(getattr(pooling, "include_prompt", True)),
        prompt=prompt,
        prompt_length=prompt_length,
        do_lower_case=bool(getattr(transformer, "do_lower_case", False)),
        native_max_seq_length=encoder.native_max_seq_length,
        max_position_embeddings=int(getattr(config, "max_position_embeddings", 512)),
        pad_id=int(tokenizer.pad_token_id or 0),
        pad_token=str(tokenizer.pad_token),
        pad_type_id=int(getattr(tokenizer, "pad_token_type_id", 0) or 0),
        dimension=encoder.dimension,
    )


def export_onnx(encoder: DualEncoder, folder: Path, *, int8: bool = False) -> Path:
    """Export the encoder's transformer (fp32, on CPU) with its pipeline and tokenizer into ``folder``, atomically.

    Files are written to a temporary sibling folder that is renamed into place, so a reader never sees half an
    export and two processes exporting at once leave one complete folder. Raises ``OnnxUnavailableError`` when the
    model cannot be exported (its reason is kept in ``export-failed.txt``, so it is not tried again)."""
    model: Any = encoder.model
    return write_export(
        folder,
        describe=lambda: _pipeline_of(encoder),
        network=model[0].auto_model,
        tokenizer=model.tokenizer,
        example=model.tokenizer(["an example query", "a second, longer example query"], padding=True),
        output="last_hidden_state",
        pipeline_file=PIPELINE_FILE,
        int8=int8,
    )


class OnnxQueryEncoder:
    """Encodes queries as the model's sentence-transformers pipeline does, with ONNX Runtime and ``tokenizers``.

    Thread-safe: ONNX Runtime sessions may run concurrently; the query batcher calls it from one thread anyway."""

    def __init__(self, session: Any, tokenizer: Any, pipeline: ExportedPipeline, max_seq_length: int) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.pipeline = pipeline
        self.max_seq_length = max_seq_length
        self.calls = 0
        """``encode_queries`` calls so far, as ``DualEncoder.calls`` counts its forward passes."""
        self._calls_lock = threading.Lock()

    @classmethod
    def open(
        cls, folder: Path, *, max_passage_tokens: int, int8: bool = False, threads: int | None = None
    ) -> OnnxQueryEncoder:
        """Load an export; ``OnnxUnavailableError`` if it is missing, unreadable or of another format. ``threads``:
        ONNX Runtime's intra-op pool (default: one per physical core, spin-waiting between calls as ONNX Runtime
        does); a fixed number of threads does not spin, which on a loaded server only burns the cores that the
        concurrent requests need."""
        pipeline, tokenizer, session = read_export(
            folder,
            pipeline_type=ExportedPipeline,
            pipeline_file=PIPELINE_FILE,
            export_format=EXPORT_FORMAT,
            int8=int8,
            threads=threads,
        )
        length = served_max_seq_length(
            pipeline.native_max_seq_length, pipeline.max_position_embeddings, max_passage_tokens
        )
        set_tokenizer_lengths(tokenizer, pipeline, length)
        return cls(session, tokenizer, pipeline, length)

    @property
    def dimension(self) -> int:
        return self.pipeline.dimension

    def encode_queries(self, queries: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        texts = [self.pipeline.prompt + query for query in queries]
        if self.pipeline.do_lower_case:
            texts = [text.lower() for text in texts]
        with self._calls_lock:
            self.calls += 1
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for rows, features in padded_batches(self._tokenizer, texts, batch_size):
            vectors[rows] = self._encode_rows(features)
        return vectors

    def _encode_rows(self, features: dict[str, np.ndarray]) -> np.ndarray:
        (hidden,) = self._session.run(["last_hidden_state"], {name: features[name] for name in self.pipeline.inputs})
        mask = features["attention_mask"].astype(np.float32)
        if not self.pipeline.include_prompt and self.pipeline.prompt_length:
            mask[:, : self.pipeline.prompt_length] = 0  # right padding: the prompt is the first tokens
        return _normalize(np.concatenate([_pool(mode, hidden, mask) for mode in self.pipeline.pooling], axis=1))


def _pool(mode: str, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' ``Pooling`` (its ``_forward_padded``) for one mode, on float32 arrays."""
    if mode == "cls":
        return np.asarray(hidden[np.arange(len(hidden)), mask.argmax(axis=1)])
    if mode == "max":
        return np.asarray(np.where(mask[..., None] > 0, hidden, -np.inf).max(axis=1))
    total = (hidden * mask[..., None]).sum(axis=1)
    count = np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
    return np.asarray(total / (count if mode == "mean" else np.sqrt(count)), dtype=np.float32)


def _normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit length (``normalize_embeddings=True``): the inner product is the cosine, as the collections expect."""
    norms = np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    return np.asarray(vectors / norms, dtype=np.float32)
