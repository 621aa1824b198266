"""Answers with provenance: marginalise a span reader's answers over the retrieved passages.

REALM's open-QA model (Guu et al. 2020, §2.4 and §3.4): p(y|x) = Σ_{z ∈ top-k} p(y|z,x) · p(z|x), with p(z|x) the
softmax of the retriever's inner products over the top k and p(y|z,x) the reader's probability of answer spans in
z. Spans are grouped by their SQuAD-normalised text, so the same answer found in several passages adds up; every
passage that contributes to the chosen answer is its provenance, with its retrieval probability and its share.

The retriever scores are the served search's scores (cosine for dense search); ``scale`` turns them into logits as
REALM's trainer does (``ferret.core.realm.retriever``, scale 20), so p(z|x) here is the same distribution the
REALM-trained retriever learned.

Example:
    >>> result = ask(searcher, reader, "handbook", "How many days of parental leave?", k=5)
    >>> result.best.text, [p.document for p in result.best.provenance]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ferret.core.errors import InvalidInputError, NotFoundError
from ferret.core.qa.answer_normalization import normalize_answer
from ferret.core.qa.span_reader import SpanCandidate

DEFAULT_SCALE = 20.0


class Reader(Protocol):
    def spans(self, question: str, passages: Sequence[str], *, top_n: int = 20) -> list[SpanCandidate]: ...


@dataclass(frozen=True)
class RetrievedPassage:
    """A passage as search returned it; ``document`` is the document's external id."""

    passage_id: int
    document: str
    title: str
    text: str
    score: float
    retrieval_probability: float = 0.0


@dataclass(frozen=True)
class Provenance:
    """One passage that supports an answer: where the span is, and how much of the answer's probability it gives."""

    passage_id: int
    document: str
    title: str
    retrieval_probability: float
    answer_probability: float
    start_char: int
    end_char: int
    context: str


@dataclass(frozen=True)
class Answer:
    text: str
    probability: float
    """The marginal p(y|x) over the retrieved passages (of the spans the reader proposed)."""
    provenance: list[Provenance] = field(default_factory=list)


@dataclass(frozen=True)
class AskResult:
    question: str
    answers: list[Answer]
    passages: list[RetrievedPassage]

    @property
    def best(self) -> Answer:
        return self.answers[0]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def retrieval_prior(scores: Sequence[float], scale: float = DEFAULT_SCALE) -> list[float]:
    """p(z|x): the softmax of the scaled retriever scores over the retrieved passages."""
    if not scores:
        return []
    top = max(scores)
    weights = [math.exp(scale * (s - top)) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def _context(text: str, start: int, end: int, width: int = 80) -> str:
    """The answer in its sentence-ish neighbourhood, for display."""
    left, right = max(0, start - width), min(len(text), end + width)
    return ("…" if left else "") + " ".join(text[left:right].split()) + ("…" if right < len(text) else "")


def marginalise(
    passages: Sequence[RetrievedPassage], spans: Sequence[SpanCandidate], *, answers: int = 3
) -> list[Answer]:
    """Answers ranked by Σ_z p(z|x) p(span|z,x) over spans with the same normalised text (see the module)."""
    totals: dict[str, float] = {}
    surface: dict[str, tuple[float, str]] = {}
    support: dict[str, dict[int, Provenance]] = {}
    for span in spans:
        key = normalize_answer(span.text)
        if not key:
            continue
        passage = passages[span.passage_index]
        share = passage.retrieval_probability * math.exp(span.log_probability)
        totals[key] = totals.get(key, 0.0) + share
        if share > surface.get(key, (-1.0, ""))[0]:
            surface[key] = (share, span.text.strip())
        known = support.setdefault(key, {}).get(span.passage_index)
        support[key][span.passage_index] = Provenance(
            passage_id=passage.passage_id,
            document=passage.document,
            title=passage.title,
            retrieval_probability=passage.retrieval_probability,
            answer_probability=share + (known.answer_probability if known else 0.0),
            start_char=known.start_char if known else span.start_char,
            end_char=known.end_char if known else span.end_char,
            context=known.context if known else _context(passage.text, span.start_char, span.end_char),
        )
    ranked = sorted(totals, key=lambda key: -totals[key])[:answers]
    return [
        Answer(
            surface[key][1],
            totals[key],
            sorted(support[key].values(), key=lambda p: -p.answer_probability),
        )
        for key in ranked
    ]


def answer_from_passages(
    question: str,
    passages: Sequence[RetrievedPassage],
    reader: Reader,
    *,
    scale: float = DEFAULT_SCALE,
    answers: int = 3,
    top_n: int = 20,
) -> AskResult:
    """Read ``passages`` (ranked by the retriever) and marginalise; the passages come back with p(z|x)."""
    if not question.strip():
        raise InvalidInputError("The question is empty; type a question to answer.")
    prior = retrieval_prior([p.score for p in passages], scale)
    weighted = [
        RetrievedPassage(p.passage_id, p.document, p.title, p.text, p.score, prob)
        for p, prob in zip(passages, prior, strict=True)
    ]
    spans = reader.spans(question, [p.text for p in weighted], top_n=top_n)
    found = marginalise(weighted, spans, answers=answers)
    if not found:
        raise NotFoundError("The reader found no answer span in the retrieved passages; try rephrasing the question.")
    return AskResult(question, found, weighted)


def ask(
    searcher: Any,
    reader: Reader,
    corpus: str,
    question: str,
    *,
    k: int = 5,
    mode: str = "dense",
    acl_groups: Sequence[str] | None = None,
    scale: float = DEFAULT_SCALE,
    answers: int = 3,
) -> AskResult:
    """Retrieve the top ``k`` passages of ``corpus`` with its served search (the caller's groups apply), then read.

    ``searcher`` is a ``ferret.core.search.searcher.Searcher``."""
    if not question.strip():
        raise InvalidInputError("The question is empty; type a question to answer.")
    results = searcher.search(corpus, question, k=k, mode=mode, acl_groups=acl_groups)
    if not results:
        raise NotFoundError(
            f"No passage of corpus {corpus!r} was retrieved for this question (none is visible to your groups, or "
            "the corpus is empty); ingest documents or ask as a member of another group."
        )
    passages = [RetrievedPassage(r.passage_id, r.external_id, r.title, r.text, r.score) for r in results]
    return answer_from_passages(question, passages, reader, scale=scale, answers=answers)
