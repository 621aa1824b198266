"""What a REALM pre-training run is asked to do: one JSON-serialisable dataclass, stored with the model version.

Defaults follow the paper where it applies to a small corpus (k=8 on a GPU, 4 on CPU; the null document; refresh
every ``refresh_every`` steps, 500 in the paper for 200k steps, scaled down here to a few hundred steps).

Example:
    >>> config = RealmConfig(steps=200, k=4).validated()
    >>> RealmConfig.from_json(config.to_json()) == config
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.realm.masking import MASKING_STRATEGIES, MaskingStrategy


@dataclass(frozen=True)
class RealmConfig:
    steps: int = 300
    k: int | None = None
    """Retrieved passages per sentence (plus the null document); None: 8 on a GPU, 4 on CPU."""
    batch_size: int = 8
    masking: MaskingStrategy = "salient"
    retriever_learning_rate: float = 1e-5
    reader_learning_rate: float = 5e-5
    mlm_warmup_steps: int = 100
    """Plain MLM steps that train the reader's new transform head before REALM starts."""
    warmup_batch_size: int = 16
    ict_warmup_steps: int = 0
    """Inverse Cloze Task steps that warm the retriever before REALM starts (§3.4); 0 starts from the base model."""
    refresh_every: int = 50
    """Steps between document-tower snapshots sent to the asynchronous index refresher."""
    eval_every: int = 50
    """Steps between retrieval-utility measurements on the held-out sentences (the checkpoint is chosen by RU)."""
    checkpoint_every: int = 50
    freeze_doc_tower: bool = False
    scale: float = 20.0
    held_out_fraction: float = 0.1
    max_held_out: int = 200
    max_sentences: int | None = None
    base_weight: float = 0.5
    """WiSE-FT: the registered weights are this share of the base model's plus the rest of the REALM-trained ones."""
    max_query_tokens: int = 64
    max_passage_tokens: int = 256
    seed: int = 13
    device: str | None = None

    def resolved_k(self, device: str) -> int:
        return self.k if self.k is not None else (8 if device.startswith("cuda") else 4)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RealmConfig:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidInputError(f"Unknown REALM settings: {', '.join(sorted(unknown))}.")
        return cls(**data).validated()

    def validated(self) -> RealmConfig:
        if self.masking not in MASKING_STRATEGIES:
            raise InvalidInputError(f"Masking must be one of {', '.join(MASKING_STRATEGIES)}, not {self.masking!r}.")
        for name in ("steps", "batch_size", "refresh_every", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise _setting_error(name, "at least 1", getattr(self, name))
        for name in ("mlm_warmup_steps", "ict_warmup_steps"):
            if getattr(self, name) < 0:
                raise _setting_error(name, "0 or more", getattr(self, name))
        if self.k is not None and self.k < 1:
            raise _setting_error("k", "at least 1", self.k)
        if not 0.0 < self.held_out_fraction < 1.0:
            raise _setting_error("held_out_fraction", "above 0 and below 1", self.held_out_fraction)
        if not 0.0 <= self.base_weight <= 1.0:
            raise _setting_error("base_weight", "between 0 and 1", self.base_weight)
        return self


def _setting_error(name: str, rule: str, value: object) -> InvalidInputError:
    """The sentence names the setting as the user gave it: ``--eval-every`` on the command line, ``eval_every`` in
    an HTTP body or a job's settings."""
    return InvalidInputError(
        f"--{name.replace('_', '-')} must be {rule}, not {value}.", over_http=f"{name} must be {rule}, not {value}."
    )
