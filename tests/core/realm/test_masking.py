"""Salient-span masking with the real spaCy model: spans that occur elsewhere, one per sentence, and its errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ferret.core.errors import FerretError, InvalidInputError
from ferret.core.realm import masking
from ferret.core.realm.masking import CorpusPassage, MaskedSentence, SpanMasker, check_enough_passages, split_held_out


@pytest.fixture(scope="module")
def nlp() -> object:
    return masking.load_ner()


def test_salient_spans_occur_in_another_document(
    nlp: object, tiny_passages: Callable[..., list[CorpusPassage]]
) -> None:
    passages = tiny_passages()
    examples = SpanMasker("salient", nlp=nlp).mask(passages, seed=13)
    assert len(examples) > len(passages)  # several sentences per passage give a span
    text_of = {p.passage_id: p.text for p in passages}
    document_of = {p.passage_id: p.document_id for p in passages}
    for example in examples:
        assert len(example.spans) == 1  # one span per sentence
        (answer,) = example.answers
        assert example.sentence in text_of[example.passage_id]
        others = [p.text.lower() for p in passages if p.document_id != document_of[example.passage_id]]
        assert any(answer.lower() in other for other in others), answer
        assert example.masked_text.count(masking.MASK) == 1


def test_a_span_found_nowhere_else_is_not_masked(nlp: object) -> None:
    passages = [
        CorpusPassage(1, 1, "Ada Lovelace wrote the first program in 1843 for the Analytical Engine."),
        CorpusPassage(2, 2, "The Analytical Engine was designed by Charles Babbage in London."),
        CorpusPassage(3, 3, "Penguins live in the southern hemisphere and cannot fly at all."),
    ]
    examples = SpanMasker("salient", nlp=nlp).mask(passages, seed=1)
    answers = {a for e in examples for a in e.answers}
    assert answers <= {"the Analytical Engine", "The Analytical Engine", "Analytical Engine"}
    assert "1843" not in answers and "Charles Babbage" not in answers


def test_no_salient_span_is_one_clear_sentence(nlp: object) -> None:
    passages = [
        CorpusPassage(1, 1, "the cat sat quietly on the warm mat all afternoon long."),
        CorpusPassage(2, 2, "a dog ran happily across the wide green field today."),
    ]
    with pytest.raises(InvalidInputError, match="No salient span"):
        SpanMasker("salient", nlp=nlp).mask(passages)


def test_random_masking_for_the_ablation(nlp: object, tiny_passages: Callable[..., list[CorpusPassage]]) -> None:
    passages = tiny_passages()
    tokens = SpanMasker("random_token", nlp=nlp).mask(passages, seed=3)
    spans = SpanMasker("random_span", nlp=nlp).mask(passages, seed=3)
    assert tokens and spans
    assert all(1 <= len(e.answers[0].split()) <= 4 for e in spans)
    assert all(len(e.spans) == 1 for e in spans)
    assert sum(len(e.spans) for e in tokens) >= len(tokens)  # at least one masked word each


def test_missing_ner_model_and_bad_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(masking, "NER_MODEL", "en_core_web_not_installed")
    with pytest.raises(FerretError, match="needs the spaCy NER model en_core_web_not_installed"):
        masking.load_ner()
    with pytest.raises(InvalidInputError, match="Masking must be one of"):
        SpanMasker("whole_words", nlp=object())  # type: ignore[arg-type]


def test_too_few_passages_for_k() -> None:
    passages = [CorpusPassage(i, 1 if i < 3 else 2, "text") for i in range(5)]
    check_enough_passages(passages, 2)
    with pytest.raises(InvalidInputError, match="too few to retrieve k=4"):
        check_enough_passages(passages, 4)


def test_held_out_split_is_by_document() -> None:
    examples = [MaskedSentence(i, i % 10, f"s{i}", ((0, 1),)) for i in range(50)]
    train, held = split_held_out(examples, 0.2, seed=13)
    assert len(train) + len(held) == 50 and held
    assert not {e.document_id for e in train} & {e.document_id for e in held}
    assert MaskedSentence.from_json(held[0].to_json()) == held[0]
