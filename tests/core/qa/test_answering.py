"""SQuAD answer normalisation and exact match; p(z|x) and the marginal over passages (REALM §2.4)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ferret.core.errors import InvalidInputError
from ferret.core.qa.answer_normalization import exact_match, normalize_answer
from ferret.core.qa.answering import RetrievedPassage, marginalise, retrieval_prior
from ferret.core.qa.span_reader import SpanCandidate
from ferret.core.qa.squad import load_qa_dataset, reading_examples


def test_squad_normalisation_and_exact_match() -> None:
    assert normalize_answer("  The Denver Broncos! ") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert exact_match("Denver Broncos.", ["the denver broncos", "Broncos"]) == 1.0
    assert exact_match("Broncos of Denver", ["Denver Broncos"]) == 0.0
    assert exact_match("theory", ["the ory"]) == 0.0  # only whole-word articles go


def test_prior_is_a_scaled_softmax() -> None:
    prior = retrieval_prior([0.9, 0.8, 0.1], scale=20.0)
    assert math.isclose(sum(prior), 1.0)
    assert math.isclose(prior[0] / prior[1], math.exp(20 * 0.1), rel_tol=1e-9)
    assert retrieval_prior([]) == []


def test_the_same_answer_in_two_passages_adds_up() -> None:
    texts = ["Lisbon is where Alma was born.", "Alma, born in Lisbon, studied botany.", "Porto is a city."]
    passages = [
        RetrievedPassage(i, f"doc-{i}", f"t{i}", text, 0.0, p)
        for i, (text, p) in enumerate(zip(texts, [0.5, 0.3, 0.2], strict=True))
    ]
    spans = [
        SpanCandidate(0, "Lisbon", 0, 6, math.log(0.6)),
        SpanCandidate(1, "Lisbon", 13, 19, math.log(0.5)),
        SpanCandidate(2, "Porto", 0, 5, math.log(0.9)),
        SpanCandidate(0, "Alma", 16, 20, math.log(0.2)),
    ]
    answers = marginalise(passages, spans)
    assert [a.text for a in answers] == ["Lisbon", "Porto", "Alma"]
    assert math.isclose(answers[0].probability, 0.5 * 0.6 + 0.3 * 0.5)
    assert [p.document for p in answers[0].provenance] == ["doc-0", "doc-1"]
    assert [round(p.retrieval_probability, 2) for p in answers[0].provenance] == [0.5, 0.3]
    assert "Lisbon" in answers[0].provenance[1].context


def test_squad_layouts_and_bad_paths(tmp_path: Path) -> None:
    squad = tmp_path / "squad.json"
    squad.write_text(
        '{"data": [{"title": "Alma", "paragraphs": [{"context": "Alma was born in Lisbon.", "qas": ['
        '{"id": "q1", "question": "Where was Alma born?", "answers": [{"text": "Lisbon", "answer_start": 17}]},'
        '{"id": "q2", "question": "Bad offset?", "answers": [{"text": "Lisbon", "answer_start": 3}]}]}]}]}'
    )
    questions, passages = load_qa_dataset(squad)
    assert [q.question_id for q in questions] == ["q1", "q2"] and list(passages) == ["a00-p000"]
    examples = reading_examples(questions, passages)
    assert [(e.answer, e.answer_start) for e in examples] == [("Lisbon", 17)]
    with pytest.raises(InvalidInputError, match=r"neither a SQuAD v1\.1 JSON file nor a BEIR folder"):
        load_qa_dataset(tmp_path)
