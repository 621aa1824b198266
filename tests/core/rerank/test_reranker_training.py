"""The cross-encoder's training can learn: a handful of groups is overfit to a loss near zero, and the saved
reranker then puts each training query's own passage first (the check that a trained reranker at chance level
lacked: issue 12, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.rerank.cross_encoder import Reranker
from ferret.core.rerank.training import (
    MIN_VALIDATION_GROUPS,
    RerankerTrainingConfig,
    TrainingGroup,
    split_validation,
    train_cross_encoder,
)

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
        negatives=3, epochs=1, cpu_min_steps=40, batch_size=4, learning_rate=1e-4, head_learning_rate=3e-3,
        max_length=64,
    )  # fmt: skip
    report = train_cross_encoder(_groups(), base_model_path(), tmp_path / "ce", config, device="cpu", minimum_pairs=1)
    assert report["steps"] == 40 and report["epochs"] == 40
    assert report["loss_first"] > 0.8 * report["chance_loss"]  # it starts at chance (ln 4)...
    assert report["loss_last"] < 0.05  # ...and can learn: the loss goes to ~0
    assert report["validation"]["groups"] == 0  # 4 groups are too few to hold any out: the last step is kept
    assert report["validation"]["note"] == "fewer than 20 held-out groups: the last step is kept"
    saved_config = json.loads((tmp_path / "ce" / "config.json").read_text())
    assert saved_config["attention_probs_dropout_prob"] == 0.0  # trained without attention dropout (the default)
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


def test_a_cpu_trains_its_epochs_without_the_gpu_minimum() -> None:
    """600 steps of ~17 s on 2 cores would be about 3 hours: a CPU runs ``epochs`` epochs, early stopping on top."""
    config = RerankerTrainingConfig(epochs=4, batch_size=16)
    assert config.steps(257, "cpu") == (4, 4 * 17)
    assert config.steps(257, "cuda:0") == (36, 36 * 17)
    assert RerankerTrainingConfig(epochs=4, cpu_min_steps=100, batch_size=16).steps(257, "cpu") == (6, 6 * 17)


@pytest.mark.slow
def test_the_held_out_score_chooses_the_checkpoint_and_stops_training(tmp_path: Path) -> None:
    """Held-out groups that contradict the training ones (each query's own passage is their negative) score worse
    at every step: training stops after ``patience`` scores without a gain and the saved reranker is the one
    scored best, here the untrained one."""
    import torch
    from sentence_transformers import CrossEncoder

    contradicting = [
        TrainingGroup(query, PASSAGES[j], [PASSAGES[i]])
        for i, query in enumerate(QUERIES)
        for j in range(len(QUERIES))
        if j != i
    ]
    config = RerankerTrainingConfig(
        negatives=3, epochs=1, cpu_min_steps=40, batch_size=4, learning_rate=1e-4, head_learning_rate=3e-3,
        max_length=64, evaluations=10, patience=3,
    )  # fmt: skip
    report = train_cross_encoder(
        _groups(), base_model_path(), tmp_path / "ce", config, device="cpu", minimum_pairs=1, validation=contradicting
    )
    validation = report["validation"]
    assert validation["groups"] == len(contradicting) and validation["best_step"] == 0
    assert validation["stopped_early"] and report["steps"] == 12  # scored at steps 0, 4, 8 and 12: three misses
    assert [step for step, _ in validation["mrr_by_step"]] == [0, 4, 8, 12]
    assert validation["mrr_by_step"][-1][1] < validation["mrr_by_step"][0][1]
    torch.manual_seed(config.seed)  # the untrained reranker: the same seeded head over the base transformer
    untrained = CrossEncoder(str(base_model_path()), num_labels=1, max_length=64, device="cpu")
    pairs = [(QUERIES[0], passage) for passage in PASSAGES]
    saved = Reranker(tmp_path / "ce").score(QUERIES[0], PASSAGES)
    assert saved == pytest.approx(untrained.predict(pairs), abs=1e-4)


def test_held_out_groups_are_whole_documents_and_too_few_hold_none_out() -> None:
    groups = [TrainingGroup(f"query {i}", f"document {i % 100}", ["other"]) for i in range(300)]
    training, validation = split_validation(groups, 0.1, seed=13)
    held = {g.positive for g in validation}
    assert len(held) == 10 and len(validation) == 30  # 10 of 100 documents, with their 3 queries each
    assert not held & {g.positive for g in training} and len(training) + len(validation) == 300
    assert split_validation(groups, 0.1, seed=13) == (training, validation)  # seeded
    few = [TrainingGroup(f"query {i}", f"document {i}", ["other"]) for i in range(194)]
    assert round(0.1 * len(few)) == MIN_VALIDATION_GROUPS - 1  # 19 documents of one group each: one too few
    assert split_validation(few, 0.1, seed=13) == (few, [])
    assert split_validation(groups, 0.0, seed=13) == (groups, [])
