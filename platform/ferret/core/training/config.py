"""Training runs described by a JSON-serialisable dataclass: it travels as the Celery payload and is stored with
the model version it produced (after sentence-transformers' TrainingArguments and Tevatron's *Arguments).

Example:
    >>> config = DualEncoderTrainingConfig.scaled(n_pairs=4_000, base_model="/models/minilm", output_dir="/tmp/m")
    >>> DualEncoderTrainingConfig.from_json(config.to_json()) == config
    True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

Precision = Literal["auto", "fp32", "fp16", "bf16"]


@dataclass(frozen=True)
class DualEncoderTrainingConfig:
    base_model: str
    output_dir: str
    learning_rate: float = 1e-5
    batch_size: int = 32
    """In-batch negatives: every other passage of the batch is a negative (softmax over the batch)."""
    max_steps: int = 200
    warmup_ratio: float = 0.1
    seed: int = 13
    loss: Literal["mnrl", "cached_mnrl"] = "mnrl"
    """``cached_mnrl`` (GradCache) makes large batches fit in memory: same loss, mini-batches of ``mini_batch_size``."""
    mini_batch_size: int = 32
    max_seq_length: int = 256
    """Wordpieces a text is cut at. The pipeline's train stage passes its corpus's passage length plus the two specials
    (130 by default): it trains on the passages search serves (``ferret.core.training.positives``)."""
    precision: Precision = "auto"
    """auto: bf16 on GPUs that support it, else fp16 on CUDA, fp32 on CPU."""
    base_weight: float = 0.0
    """Weight-space ensembling with the base model (WiSE-FT, Wortsman et al. 2022): final = (1-w)·tuned + w·base."""
    hard_negatives: Literal["none", "bm25", "residual"] = "none"
    cropping_warmup_steps: int = 0
    """Steps of label-free warm-up on independent-cropping pairs of the corpus (Contriever) before the pairs."""
    attention_dropout: float | None = 0.0
    """Dropout on the attention probabilities while training; None keeps the base model's (0.1 for MiniLM). Off by
    default: on CPU, PyTorch's fused attention kernels take no dropout, so it forces the unfused path that builds
    every attention matrix: 7.7 s against 5.0 s per step of 32 pairs on 2 CPU cores (benchmarks/RESULTS.md).
    Hidden-state dropout stays on."""
    device: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> DualEncoderTrainingConfig:
        values = json.loads(data) if isinstance(data, str) else dict(data)
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown training settings: {', '.join(sorted(unknown))}")
        return cls(**values)

    @classmethod
    def scaled(cls, n_pairs: int, *, gpu: bool = False, **overrides: Any) -> DualEncoderTrainingConfig:
        """Promptagator-style defaults scaled to the data: large in-batch-negative batches on a GPU (GradCache keeps
        memory flat), smaller on CPU; about one epoch over the pairs, capped so a small corpus is not overfitted."""
        batch = 128 if gpu else 32
        batch = max(8, min(batch, n_pairs // 4 or 8))
        steps = max(20, min(n_pairs // batch, 2_000 if gpu else 400))
        defaults: dict[str, Any] = {
            "batch_size": batch,
            "max_steps": steps,
            "loss": "cached_mnrl" if batch > 64 else "mnrl",
        }
        defaults.update(overrides)
        return cls(**defaults)


def attention_dropout_overrides(rate: float | None) -> dict[str, float]:
    """The model configuration's attention dropout as ``config_kwargs`` for sentence-transformers (BERT's key, which
    MiniLM, its cross-encoder and the REALM retriever use); None keeps the model's own."""
    return {} if rate is None else {"attention_probs_dropout_prob": rate}
