"""Margin-MSE distillation (GPL) moves the dual encoder's score margins towards the teacher's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.rerank.training import TrainingGroup
from ferret.core.training.distillation import DistillationConfig, train_margin_mse

GROUPS = [
    TrainingGroup("aspirin and platelets", "Aspirin blocks platelet aggregation.", ["Paris hosted the 1889 fair."]),
    TrainingGroup("tower built in paris", "The Eiffel Tower opened in 1889.", ["Chloroplasts capture light."]),
    TrainingGroup("plant light energy", "Photosynthesis runs in chloroplasts.", ["Lists over-allocate memory."]),
    TrainingGroup("python list growth", "Python lists over-allocate when they grow.", ["Aspirin thins blood."]),
]


def _margins(path: Path | str, scale: float) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    q = model.encode([g.query for g in GROUPS], normalize_embeddings=True)
    p = model.encode([g.positive for g in GROUPS], normalize_embeddings=True)
    n = model.encode([g.negatives[0] for g in GROUPS], normalize_embeddings=True)
    return np.asarray(scale * ((q * p).sum(-1) - (q * n).sum(-1)))


@pytest.mark.slow
@pytest.mark.parametrize("logit", [2.0, 0.02])
def test_the_student_learns_the_teachers_margins_whatever_their_scale(tmp_path: Path, logit: float) -> None:
    # The teacher says: the second and fourth "positives" are worse than their negatives, the others better. The base
    # encoder prefers every positive, so only learning the margins flips those two. A teacher whose margins are a
    # hundredth of the student's (±0.04) teaches the same orderings: its margins are scaled to the student's, so
    # the student does not shrink every margin by pulling its vectors together.
    teacher = [[logit, -logit], [-logit, logit], [logit, -logit], [-logit, logit]]
    config = DistillationConfig(epochs=1, cpu_min_steps=30, batch_size=4, learning_rate=1e-4, scale=20.0)
    before = _margins(base_model_path(), config.scale)
    assert (before > 0).all()
    report = train_margin_mse(GROUPS, teacher, base_model_path(), tmp_path / "student", config, device="cpu",
                              minimum_pairs=1)  # fmt: skip
    after = _margins(tmp_path / "student", config.scale)
    assert report["objective"] == "margin-mse" and report["steps"] == 30
    assert report["loss_last"] < report["loss_first"] / 4
    assert after[1] < 0 and after[3] < 0 and after[0] > 0 and after[2] > 0, after
    assert report["teacher_scale"] == pytest.approx(np.sqrt(np.mean(before**2)) / (2 * logit), rel=1e-3)
    assert np.abs(after).mean() > 0.5 * np.abs(before).mean(), (before, after)  # margins kept, not shrunk


def test_distillation_refuses_too_few_groups_and_mismatched_scores(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="Only 4 kept synthetic pairs; distillation needs at least 200"):
        train_margin_mse(GROUPS, [[0.0, 0.0]] * 4, base_model_path(), tmp_path / "s")
    with pytest.raises(InvalidInputError, match="do not match the training groups"):
        train_margin_mse(GROUPS, [[0.0]] * 4, base_model_path(), tmp_path / "s", minimum_pairs=1)
    with pytest.raises(InvalidInputError, match=r"^The teacher scores each query's documents alike"):
        train_margin_mse(GROUPS, [[1.0, 1.0]] * 4, base_model_path(), tmp_path / "s", minimum_pairs=1)
    assert not (tmp_path / "s").exists()


def test_a_cpu_runs_the_epochs_and_a_gpu_the_minimum_steps() -> None:
    config = DistillationConfig(epochs=2, batch_size=32)
    assert config.steps(320, "cpu") == (2, 20)  # 10 steps an epoch, no minimum on a CPU
    assert config.steps(320, "cuda:0") == (40, 400)  # at least 400 steps on a GPU
    assert DistillationConfig(epochs=2, batch_size=32, cpu_min_steps=30).steps(320, "cpu") == (3, 30)
