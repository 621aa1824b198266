"""Distil the cross-encoder reranker into the dual encoder with margin-MSE (GPL, Wang et al. 2022 §3).

GPL (Generative Pseudo Labeling) labels each (synthetic query, its document, a mined negative) triple with a
cross-encoder and trains the dual encoder to reproduce the teacher's score *margin* between the two documents:

    L = ( (s(q, d⁺) − s(q, d⁻)) − (t(q, d⁺) − t(q, d⁻)) )²        (Margin-MSE, Hofstätter et al. 2020, eq. 1)

with ``s`` the student's similarity and ``t`` the teacher's logit. A margin, not a label: a mined "negative"
that the teacher finds as relevant as the positive (a false negative) asks for no separation, and a noisy
query whose own document the teacher scores low pulls the student the other way, so the filter's mistakes cost
less than with the in-batch softmax. Ferret's dual encoder normalises its vectors (cosine in [−1, 1]) while the
teacher's logits span about ±10, so the student's similarity is ``scale``·cosine (the same 20 as the
in-batch loss's temperature).

The teacher's margins are brought to the student's scale first: one factor, the ratio of the student's margin
spread (root mean square over up to ``CALIBRATION_GROUPS`` triples, before training) to the teacher's. GPL's teacher
is an MS MARCO cross-encoder whose logits span ±10; Ferret's is trained on a few hundred synthetic pairs, and on
SciFact its margins were a thirteenth of the student's. Matched as they were, the cheapest way to shrink every
margin is to pull all vectors together: on SciFact (1,168 groups, margin-MSE 22.3 → 0.21) the student's documents
ended at a mean cosine of 0.94 with one another (0.13 before) and hybrid search read BM25's figures
(benchmarks/RESULTS.md, thirty-fourth session). One factor keeps every ordering the teacher gives.

Negatives are the reranker's groups (``ferret.core.rerank.training.TrainingGroup``: ranks ``skip_top``..
``mine_depth`` of the hybrid first stage), one drawn anew per group and epoch. The teacher scores every
(query, document) of a group once, before training. This module imports torch, sentence-transformers and numpy
only, so a GPU machine can run it on carried files.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.rerank.training import (
    MIN_PAIRS,
    TrainingGroup,
    check_pair_count,
    epoch_plan,
    loss_report,
    optimise_in_batches,
)

CALIBRATION_GROUPS = 128
"""Triples (a group's positive and first negative) that measure the student's margin spread before training."""


@dataclass(frozen=True)
class DistillationConfig:
    epochs: int = 2
    min_steps: int = 400
    """On a GPU, more epochs are run until this many optimiser steps (a few hundred queries give few steps an
    epoch): 418 steps took 52 s on an H100 (benchmarks/RESULTS.md, issue 12, third session)."""
    cpu_min_steps: int = 0
    """The minimum on a CPU: ``epochs`` epochs alone, as for the reranker (``RerankerTrainingConfig.cpu_min_steps``);
    a step embeds 3 × ``batch_size`` texts, several seconds on 2 cores, so 400 steps would take most of an hour."""
    batch_size: int = 32
    """Triples per step."""
    learning_rate: float = 2e-5
    warmup_fraction: float = 0.1
    scale: float = 20.0
    """Student similarity = scale · cosine, on the teacher's logit scale."""
    seed: int = 13

    def steps(self, groups: int, device: str = "cuda") -> tuple[int, int]:
        """(epochs, optimiser steps) for ``groups`` usable groups trained on ``device``."""
        minimum = self.cpu_min_steps if device == "cpu" else self.min_steps
        return epoch_plan(groups, self.batch_size, self.epochs, minimum)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def teacher_scores(
    groups: Sequence[TrainingGroup], reranker_path: str | Path, *, device: str | None = None, batch_size: int = 128
) -> list[list[float]]:
    """The cross-encoder's logit for (query, positive) then (query, each negative), per group."""
    import torch
    from sentence_transformers import CrossEncoder

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    teacher = CrossEncoder(str(reranker_path), num_labels=1, device=device)
    teacher.model.float().eval()
    pairs = [(g.query, text) for g in groups for text in [g.positive, *g.negatives]]
    logits = teacher.predict(
        pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(), convert_to_numpy=True, show_progress_bar=False
    )
    flat = [float(x) for x in logits.reshape(-1)]
    scores, at = [], 0
    for g in groups:
        width = 1 + len(g.negatives)
        scores.append(flat[at : at + width])
        at += width
    return scores


def train_margin_mse(
    groups: Sequence[TrainingGroup],
    scores: Sequence[Sequence[float]],
    student_path: str | Path,
    output: Path,
    config: DistillationConfig = DistillationConfig(),
    *,
    device: str | None = None,
    minimum_pairs: int = MIN_PAIRS,
    progress: Callable[[float], None] = lambda fraction: None,
) -> dict[str, Any]:
    """Train the dual encoder at ``student_path`` on the teacher's margins and save it to ``output``.

    ``scores[i]`` holds the teacher's logits for ``groups[i]``'s positive then its negatives (``teacher_scores``).
    Fewer than ``minimum_pairs`` groups are refused with their count, as for the reranker itself."""
    import torch
    from sentence_transformers import SentenceTransformer

    check_pair_count(len(groups), minimum_pairs, what="distillation")
    if len(scores) != len(groups) or any(len(s) != 1 + len(g.negatives) for g, s in zip(groups, scores, strict=False)):
        raise InvalidInputError("The teacher's scores do not match the training groups (one per document).")
    usable = [(g, s) for g, s in zip(groups, scores, strict=True) if g.negatives]
    if not usable:
        raise InvalidInputError("No training group has a mined negative; the first stage returned nothing to mine.")
    torch.manual_seed(config.seed)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    student = SentenceTransformer(str(student_path), device=device, local_files_only=True)
    student.float().train()
    preprocess = getattr(student, "preprocess", None) or student.tokenize
    epochs, _ = config.steps(len(usable), device)
    optimizer = torch.optim.AdamW(student.parameters(), lr=config.learning_rate, weight_decay=0.01)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))
    rng = random.Random(config.seed)

    def embed(texts: list[str]) -> Any:
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in preprocess(texts).items()}
        with autocast:
            vectors = student(features)["sentence_embedding"].float()
        return torch.nn.functional.normalize(vectors, dim=-1)

    def margins(batch: Sequence[tuple[TrainingGroup, Sequence[float]]], picks: Sequence[int]) -> Any:
        q = embed([g.query for g, _ in batch])
        pos = embed([g.positive for g, _ in batch])
        neg = embed([g.negatives[j] for (g, _), j in zip(batch, picks, strict=True)])
        return config.scale * ((q * pos).sum(-1) - (q * neg).sum(-1))

    def teacher_margins(batch: Sequence[tuple[TrainingGroup, Sequence[float]]], picks: Sequence[int]) -> Any:
        return torch.tensor([s[0] - s[1 + j] for (_, s), j in zip(batch, picks, strict=True)], device=device)

    sample = usable[:CALIBRATION_GROUPS]
    student.eval()
    with torch.no_grad():
        student_rms = float(margins(sample, [0] * len(sample)).pow(2).mean().sqrt())
    teacher_rms = float(teacher_margins(sample, [0] * len(sample)).pow(2).mean().sqrt())
    if teacher_rms == 0.0:
        raise InvalidInputError("The teacher scores each query's documents alike; it has no margin to distil.")
    teacher_scale = student_rms / teacher_rms
    student.train()

    def margin_mse(batch: list[tuple[TrainingGroup, Sequence[float]]]) -> Any:
        picks = [rng.randrange(len(g.negatives)) for g, _ in batch]
        return torch.nn.functional.mse_loss(margins(batch, picks), teacher_scale * teacher_margins(batch, picks))

    losses, seconds = optimise_in_batches(
        usable, margin_mse, optimizer, student.parameters(), rng,
        epochs=epochs, batch_size=config.batch_size, warmup_fraction=config.warmup_fraction, progress=progress,
    )  # fmt: skip
    student.eval()
    output.mkdir(parents=True, exist_ok=True)
    student.save(str(output))
    return {
        "objective": "margin-mse",
        **loss_report(losses, seconds, groups=len(usable), epochs=epochs, device=device),
        "teacher_scale": round(teacher_scale, 4),  # the factor on the teacher's margins
        "config": config.to_json(),
    }
