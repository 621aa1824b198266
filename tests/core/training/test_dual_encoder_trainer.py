"""Dual-encoder fine-tuning on a tiny synthetic set with the real MiniLM: it learns, saves, and averages."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.training.config import DualEncoderTrainingConfig
from ferret.core.training.dual_encoder_trainer import train_dual_encoder

TOPICS = [
    ("glacier", "Glaciers are slow rivers of ice that carve valleys into mountains."),
    ("volcano", "A volcano erupts when magma rises through cracks in the crust."),
    ("coral", "Coral reefs are built by colonies of tiny animals in warm shallow seas."),
    ("desert", "Deserts receive less than 250 millimetres of rain in a year."),
    ("tundra", "The tundra is a treeless plain where the subsoil stays frozen."),
    ("monsoon", "Monsoon winds bring heavy seasonal rain to South Asia."),
    ("canyon", "Rivers cut canyons by eroding rock over millions of years."),
    ("delta", "A river delta forms where sediment settles at the river mouth."),
]
# Code words the base model has no reason to link to the topics: training must teach the mapping.
CODES = {"glacier": "zorblat", "volcano": "quenmix", "coral": "vextrup", "desert": "plimdor",
         "tundra": "sarnquel", "monsoon": "drobfen", "canyon": "yultrak", "delta": "fenwobb"}  # fmt: skip


def pairs() -> tuple[list[str], list[str]]:
    queries, passages = [], []
    for _ in range(4):
        for topic, passage in TOPICS:
            queries.append(f"{CODES[topic]} facts")
            passages.append(passage)
    return queries, passages


def accuracy(encoder: DualEncoder) -> float:
    q = encoder.encode_queries([f"{CODES[t]} facts" for t, _ in TOPICS])
    p = encoder.encode_passages([passage for _, passage in TOPICS])
    return float(np.mean(np.argmax(q @ p.T, axis=1) == np.arange(len(TOPICS))))


def test_config_round_trips_through_json(tmp_path: Path) -> None:
    config = DualEncoderTrainingConfig.scaled(4_000, base_model="m", output_dir=str(tmp_path), base_weight=0.3)
    assert DualEncoderTrainingConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="unknown training settings"):
        DualEncoderTrainingConfig.from_json({**config.to_json(), "lr": 1})


def test_scaled_defaults_grow_with_the_data() -> None:
    small = DualEncoderTrainingConfig.scaled(200, base_model="m", output_dir="o")
    large = DualEncoderTrainingConfig.scaled(200_000, base_model="m", output_dir="o", gpu=True)
    assert small.batch_size <= 32 and small.max_steps >= 20
    assert large.batch_size == 128 and large.loss == "cached_mnrl" and large.max_steps > small.max_steps


@pytest.mark.slow
def test_training_learns_the_pairs_and_saves_a_loadable_model(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    base = DualEncoder.load(base_model_path(), device="cpu")
    before = accuracy(base)
    config = DualEncoderTrainingConfig(
        base_model=str(base_model_path()), output_dir=str(tmp_path / "tuned"), learning_rate=2e-4,
        batch_size=8, max_steps=24, warmup_ratio=0.0, device="cpu",
    )  # fmt: skip
    steps: list[float] = []
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="ferret.core.training.dual_encoder_trainer"):
        output = train_dual_encoder(config, *pairs(), progress=lambda activity, fraction: steps.append(fraction))
    printed = capfd.readouterr()
    # The trainer's step bar (24 steps) and loss lines go to the log, not the console (issue 11, item 11); the
    # weight-loading bars are switched off by the CLI's set-up (ferret.cli.logs), which this test does not run.
    assert "'loss'" not in printed.out + printed.err and "/24 [" not in printed.err, printed
    assert any("training step" in record.getMessage() for record in caplog.records)
    tuned = DualEncoder.load(output, device="cpu")
    assert accuracy(tuned) > before
    assert steps and steps[-1] == 1.0
    # Trained without attention dropout (the default: on CPU it forces the unfused attention path).
    assert json.loads((output / "config.json").read_text())["attention_probs_dropout_prob"] == 0.0


@pytest.mark.slow
def test_full_base_weight_gives_back_the_base_model(tmp_path: Path) -> None:
    base = DualEncoder.load(base_model_path(), device="cpu")
    config = DualEncoderTrainingConfig(
        base_model=str(base_model_path()), output_dir=str(tmp_path / "averaged"), learning_rate=2e-4,
        batch_size=8, max_steps=4, device="cpu", base_weight=1.0, attention_dropout=None,
    )  # fmt: skip
    output = train_dual_encoder(config, *pairs())
    averaged = DualEncoder.load(output, device="cpu")
    assert json.loads((output / "config.json").read_text())["attention_probs_dropout_prob"] == 0.1  # the base's
    texts = [passage for _, passage in TOPICS]
    np.testing.assert_allclose(averaged.encode(texts), base.encode(texts), atol=1e-5)


@pytest.mark.slow
def test_residual_objective_learns_with_bm25_negatives_and_gaps(tmp_path: Path) -> None:
    """CLEAR's hinge beside the in-batch softmax: the model still learns the pairs; gaps without negatives are
    refused."""
    base = DualEncoder.load(base_model_path(), device="cpu")
    before = accuracy(base)
    queries, passages = pairs()
    # Distinct texts: the no-duplicates batch sampler would not put a passage beside its copy as a negative.
    negatives = [f"{TOPICS[(i + 1) % len(TOPICS)][1]} (note {i})" for i in range(len(queries))]
    gaps = [(-0.5 if i % 2 else 0.8) for i in range(len(queries))]
    config = DualEncoderTrainingConfig(
        base_model=str(base_model_path()), output_dir=str(tmp_path / "residual"), learning_rate=2e-4,
        batch_size=8, max_steps=24, warmup_ratio=0.0, device="cpu",
    )  # fmt: skip

    tuned = DualEncoder.load(
        train_dual_encoder(config, queries, passages, negatives=negatives, lexical_gaps=gaps), device="cpu"
    )

    assert accuracy(tuned) > before
    with pytest.raises(InvalidInputError, match="one BM25 negative and one BM25 gap"):
        train_dual_encoder(config, queries, passages, lexical_gaps=gaps)


def test_residual_margin_follows_the_bm25_gap() -> None:
    """m = c - λ·gap (CLEAR §3.2), clamped at 0: the loss on a pair BM25 misses exceeds that on one it gets."""
    import torch

    from ferret.core.training.residual import ResidualMarginLoss

    class Fixed(torch.nn.Module):
        def __init__(self, vectors: list[list[list[float]]]) -> None:
            super().__init__()
            self.vectors = iter(torch.tensor(v) for v in vectors)

        def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {"sentence_embedding": next(self.vectors)}

    anchors, positives, negatives = [[1.0, 0.0]], [[0.8, 0.6]], [[0.6, 0.8]]  # cosine gap 0.2

    def loss(gap: float) -> float:
        module = ResidualMarginLoss(Fixed([anchors, positives, negatives]), margin=0.3, lexical_weight=0.3)
        in_batch = torch.nn.functional.cross_entropy(torch.tensor([[0.8, 0.6]]) * 20, torch.tensor([0]))
        return float(module([{}, {}, {}], torch.tensor([gap])) - in_batch)

    assert loss(1.0) == pytest.approx(0.0, abs=1e-6)  # margin 0: BM25 already separates them
    assert loss(0.0) == pytest.approx(0.1, abs=1e-5)  # margin 0.3 - cosine gap 0.2
    assert loss(-1.0) == pytest.approx(0.4, abs=1e-5)  # BM25 prefers the negative: margin 0.6


def test_too_few_pairs_is_a_clear_error(tmp_path: Path) -> None:
    config = DualEncoderTrainingConfig(base_model=str(base_model_path()), output_dir=str(tmp_path), batch_size=8)
    with pytest.raises(InvalidInputError, match="generate more queries"):
        train_dual_encoder(config, ["a", "b"], ["c", "d"])
    with pytest.raises(InvalidInputError, match="one passage"):
        train_dual_encoder(config, ["a", "b"], ["c"])


@pytest.mark.slow
def test_cropping_warm_up_runs_before_the_pairs_and_needs_a_corpus(tmp_path: Path) -> None:
    corpus = [" ".join([passage] * 3) for _, passage in TOPICS]  # passages of at least 16 words
    config = DualEncoderTrainingConfig(
        base_model=str(base_model_path()), output_dir=str(tmp_path / "warm"), learning_rate=2e-4,
        batch_size=8, max_steps=4, device="cpu", cropping_warmup_steps=2,
    )  # fmt: skip
    steps: list[float] = []
    output = train_dual_encoder(
        config, *pairs(), corpus=corpus, progress=lambda activity, fraction: steps.append(fraction)
    )
    warmed = DualEncoder.load(output, device="cpu")
    cold_config = DualEncoderTrainingConfig(**{**config.to_json(), "output_dir": str(tmp_path / "cold"),
                                               "cropping_warmup_steps": 0})  # fmt: skip
    cold = DualEncoder.load(train_dual_encoder(cold_config, *pairs()), device="cpu")
    texts = [passage for _, passage in TOPICS]
    # Same seed and supervised steps: only the warm-up can make the two models differ.
    assert not np.allclose(warmed.encode(texts), cold.encode(texts), atol=1e-4)
    assert steps == [0.25, 0.5, 0.75, 1.0]  # progress reports the supervised steps only
    with pytest.raises(InvalidInputError, match="cropping warm-up"):
        train_dual_encoder(config, *pairs(), corpus=["too short"])
