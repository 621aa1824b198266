"""A dual encoder on sentence-transformers: one tower for queries and passages, unit-length vectors.

Example:
    >>> encoder = DualEncoder.load(base_model_path())
    >>> encoder.encode_queries(["who won super bowl 50"]).shape
    (1, 384)
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ferret.core.encoder.onnx_export import length_buckets, served_max_seq_length
from ferret.core.errors import InvalidInputError


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


PASSAGE_MEMO_SIZE = 20_000
"""Passages whose vectors an encoder keeps (about 30 MB at 384 dimensions): see :class:`PassageMemo`."""


class PassageMemo:
    """The vectors of the passages an encoder embedded last, by a digest of their text (least recently used out).

    Why: the steps of one job, and the jobs of one process, embed the same passages with the same model again: the
    pipeline's guard ranks a sample of the corpus with the candidate and the reference model, then the index stage (or
    the quickstart's evaluation) embeds the whole corpus with the candidate, and the reference's vectors are those its
    index build computed. Each repeat cost ~10 s per 300 demo passages on 2 CPU cores (benchmarks/RESULTS.md)."""

    def __init__(self, capacity: int = PASSAGE_MEMO_SIZE) -> None:
        self.capacity = capacity
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def lookup(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        with self._lock:
            found = {key: self._vectors[key] for key in keys if key in self._vectors}
            for key in found:
                self._vectors.move_to_end(key)
        return found

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()

    def store(self, vectors: dict[bytes, np.ndarray]) -> None:
        """Keeps copies (a row of a large batch would keep the whole batch alive), of the last ``capacity`` only: a
        large index build does not churn through the memo."""
        kept = list(vectors.items())[-self.capacity :]
        with self._lock:
            for key, vector in kept:
                self._vectors[key] = vector.copy()
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)


class DualEncoder:
    """Shared-tower bi-encoder. Vectors are L2-normalized, so inner product equals cosine similarity.

    On a CPU, texts are encoded in batches of about one token length, so little time goes to padding (``encode``);
    vectors come back in input order.
    """

    def __init__(self, model: Any, path: str, device: str, *, native_max_seq_length: int | None = None) -> None:
        self._model = model
        self.path = path
        self.device = device
        self.native_max_seq_length = int(native_max_seq_length or model.max_seq_length)
        """The model folder's own truncation length, before Ferret lengthened it to fit a passage."""
        self._lock = threading.Lock()  # one forward pass at a time: torch on CPU is already multi-threaded
        self.calls = 0
        """``encode`` calls so far: how a test or a benchmark sees that concurrent queries were batched."""
        self.passage_memo = PassageMemo()

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None, max_seq_length: int | None = None) -> DualEncoder:
        from sentence_transformers import SentenceTransformer

        path = str(path)
        if not Path(path).is_dir():
            raise InvalidInputError(f"Model folder {path} does not exist; point FERRET_BASE_MODEL at a local model.")
        device = device or default_device()
        model: Any = SentenceTransformer(path, device=device, local_files_only=True)
        if device.startswith("cuda"):
            model.half()  # fp16 on GPU: twice the throughput, same ranking for retrieval
        native = int(model.max_seq_length)
        if max_seq_length is not None:
            positions = int(getattr(model[0].auto_model.config, "max_position_embeddings", 512))
            model.max_seq_length = served_max_seq_length(native, positions, max_seq_length - 2)
        return cls(model, path, device, native_max_seq_length=native)

    @property
    def model(self) -> object:
        return self._model

    @property
    def dimension(self) -> int:
        model = self._model
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def max_seq_length(self) -> int:
        return int(self._model.max_seq_length)

    @property
    def tokenizer(self) -> object:
        return self._model.tokenizer

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock, torch.inference_mode():
            self.calls += 1
            if self.device == "cpu" and len(texts) > 1:
                return self._encode_by_length(texts, batch_size)
            vectors = self._model.encode(
                list(texts),
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _encode_by_length(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """On a CPU, batches of about one token length (``length_buckets``), each padded to its own longest.

        sentence-transformers sorts a call's texts by characters and cuts batches of ``batch_size``, whose rows can
        still differ by a hundred wordpieces; on 2 CPU cores the 998 passages of 600 SciFact documents took 92 s
        this way against 101-105 s in one sorted call (benchmarks/RESULTS.md, issue 16, tenth session)."""
        model: Any = self._model
        ids = model.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length)["input_ids"]
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        for rows in length_buckets([len(row) for row in ids], batch_size):
            vectors[rows] = model.encode(
                [texts[row] for row in rows],
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return vectors

    def encode_queries(self, queries: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        return self.encode(queries, batch_size=batch_size)

    def encode_passages(self, passages: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Passage vectors in input order; passages this encoder embedded lately come from its memo, and only the
        others (each once) are encoded."""
        if not passages:
            return self.encode(passages)
        keys = [PassageMemo.key(text) for text in passages]
        vectors = self.passage_memo.lookup(keys)
        missing = {key: text for key, text in zip(keys, passages, strict=True) if key not in vectors}
        if not missing:
            return np.stack([vectors[key] for key in keys])
        encoded = self.encode(list(missing.values()), batch_size=batch_size)
        fresh = dict(zip(missing, encoded, strict=True))
        self.passage_memo.store(fresh)
        if len(fresh) == len(keys):  # nothing remembered, no repeats: the batch as encoded (an index build's case)
            return encoded
        vectors.update(fresh)
        return np.stack([vectors[key] for key in keys])
