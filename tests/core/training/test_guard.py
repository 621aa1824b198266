"""The promotion guard on real encoders: no gain → refused; a model that learned the task → promoted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import base_model_path
from ferret.core.training.config import DualEncoderTrainingConfig
from ferret.core.training.dual_encoder_trainer import train_dual_encoder
from ferret.core.training.guard import GuardEvidence, LabelledQuery, run_guard

TOPICS = {
    1: ("zorblat", "Glaciers are slow rivers of ice that carve valleys into mountains."),
    2: ("quenmix", "A volcano erupts when magma rises through cracks in the crust."),
    3: ("vextrup", "Coral reefs are built by colonies of tiny animals in warm shallow seas."),
    4: ("plimdor", "Deserts receive less than 250 millimetres of rain in a year."),
    5: ("sarnquel", "The tundra is a treeless plain where the subsoil stays frozen."),
    6: ("drobfen", "Monsoon winds bring heavy seasonal rain to South Asia."),
}
DISTRACTORS = {
    100 + i: text
    for i, text in enumerate(
        ["Bread rises because yeast releases gas.", "Chess openings are studied for centuries.",
         "A violin has four strings tuned in fifths.", "Trains in Japan are famous for punctuality."]
    )
}  # fmt: skip


@pytest.fixture(scope="module")
def base() -> DualEncoder:
    return DualEncoder.load(base_model_path(), device="cpu")


def evidence() -> GuardEvidence:
    corpus = {doc_id: text for doc_id, (_, text) in TOPICS.items()} | DISTRACTORS
    held_out = [LabelledQuery(f"{code} facts", doc_id) for doc_id, (code, _) in TOPICS.items()]
    examples = [LabelledQuery("how do volcanoes erupt", 2), LabelledQuery("where is the subsoil frozen", 5)]
    return GuardEvidence.sample(examples, held_out, corpus, distractors=10)


def test_too_few_held_out_queries_never_promote(base: DualEncoder) -> None:
    report = run_guard(base, base, evidence())
    assert not report.passed
    assert "held-out queries" in report.reason and "at least 50" in report.reason
    assert "up to 8 per document" in report.reason  # a small corpus has no more documents to generate for


def test_a_model_no_better_than_the_active_one_is_refused(base: DualEncoder) -> None:
    report = run_guard(base, base, evidence(), min_held_out=1)
    assert not report.passed
    assert "does not beat" in report.reason
    assert report.candidate == report.reference
    assert report.documents == len(TOPICS) + len(DISTRACTORS)


@pytest.mark.slow
def test_a_model_that_learned_the_task_passes(base: DualEncoder, tmp_path: Path) -> None:
    queries = [f"{code} facts" for code, _ in TOPICS.values()] * 4
    passages = [text for _, text in TOPICS.values()] * 4
    config = DualEncoderTrainingConfig(
        base_model=str(base_model_path()), output_dir=str(tmp_path / "tuned"), learning_rate=2e-4,
        batch_size=6, max_steps=24, warmup_ratio=0.0, device="cpu",
    )  # fmt: skip
    tuned = DualEncoder.load(train_dual_encoder(config, queries, passages), device="cpu")
    report = run_guard(tuned, base, evidence(), max_example_drop=0.5, min_held_out=1)
    assert report.candidate.held_out_mrr > report.reference.held_out_mrr
    assert report.passed, report.reason

    # The veto: a candidate that ranks an independent retriever's labels much worse than the active model is
    # refused whatever else it gains. Here the base model is the candidate against the tuned one, on labels only
    # the tuned model knows.
    known = evidence()
    vetoed = GuardEvidence(known.examples, known.held_out, known.documents, bm25_labelled=known.held_out)
    report = run_guard(base, tuned, vetoed, max_example_drop=1.0, min_held_out=1, min_gain=-1.0)
    assert report.candidate.bm25_agreement_mrr < report.reference.bm25_agreement_mrr - 0.01
    assert not report.passed and "agrees less with BM25" in report.reason


def test_bootstrap_bound_needs_a_gain_on_most_queries() -> None:
    from ferret.core.training.guard import bootstrap_low

    assert bootstrap_low(np.full(60, 0.1)) > 0
    lucky = np.zeros(60)
    lucky[:2] = 1.0  # two lucky queries, nothing elsewhere: a mean gain of 0.033 that is not sure
    assert lucky.mean() > 0.005 and bootstrap_low(lucky) <= 0
    assert bootstrap_low(np.zeros(0)) == 0.0
