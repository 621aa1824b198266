"""The cross-encoder's training can learn: a handful of groups is overfit to a loss near zero, and the saved
reranker then puts each training query's own passage first (the check that a trained reranker at chance level
lacked: issue 12, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.rerank.cross_encoder import Reranker
from ferret.core.rerank.training import RerankerTrainingConfig, TrainingGroup, train_cross_encoder

PASSAGES = [
    "Aspirin irreversibly inhibits cyclooxygenase and lowers platelet aggregation.",
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "Photosynthesis converts light energy into chemical energy in chloroplasts.",
    "Python lists are dynamic arrays that grow by over-allocating memory.",
    "Volcanic eruptions inject sulfate aerosols that cool the climate for years.",
]
QUERIES = [
    "how does aspirin affect platelets",
    "when was the eiffel tower built",
    "where does photosynthesis happen in plant cells",
    "how do python lists grow",
]


def _groups() -> list[TrainingGroup]:
    return [
        TrainingGroup(query, PASSAGES[i], [p for j, p in enumerate(PASSAGES) if j != i])
        for i, query in enumerate(QUERIES)
    ]


@pytest.mark.slow
def test_a_few_groups_are_overfit_and_the_reranker_ranks_their_passages_first(tmp_path: Path) -> None:
    config = RerankerTrainingConfig(
        negatives=3, epochs=1, min_steps=40, batch_size=4, learning_rate=1e-4, head_learning_rate=3e-3,
        max_length=64,
    )  # fmt: skip
    report = train_cross_encoder(_groups(), base_model_path(), tmp_path / "ce", config, device="cpu", minimum_pairs=1)
    assert report["steps"] == 40 and report["epochs"] == 40
    assert report["loss_first"] > 0.8 * report["chance_loss"]  # it starts at chance (ln 4)...
    assert report["loss_last"] < 0.05  # ...and can learn: the loss goes to ~0
    reranker = Reranker(tmp_path / "ce")
    for i, query in enumerate(QUERIES):
        scores = reranker.score(query, PASSAGES)
        assert int(scores.argmax()) == i, (query, scores)


def test_training_refuses_too_few_pairs_with_the_count(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="Only 4 kept synthetic pairs; a reranker needs at least 200"):
        train_cross_encoder(_groups(), base_model_path(), tmp_path / "ce", device="cpu")
    assert not (tmp_path / "ce").exists()


def test_more_epochs_until_the_minimum_number_of_steps() -> None:
    config = RerankerTrainingConfig(epochs=4, min_steps=600, batch_size=16)
    assert config.steps(257) == (36, 36 * 17)  # 17 steps an epoch: 36 epochs reach 600
    assert config.steps(20_000) == (4, 4 * 1250)  # a large set keeps its 4 epochs
