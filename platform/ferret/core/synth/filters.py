"""Filters for noisy synthetic queries; each drop keeps its reason on the query's row (status ``dropped``).

In order: length, copies (of an example query, or near-verbatim of the document), duplicates (the first kept),
optionally the generator's own score (queries whose mean token log-probability falls below a quantile of the run's
own distribution: issue 12 item 5, free since the sampler has the logits), then round-trip consistency
(Promptagator, Dai et al. 2022, section 3.2: keep (q, d) only when a retriever ranks
d in q's top K) and optionally best-of-n (per document, only the query whose document ranks best). Without a given
K, the depth follows the task's own examples (``round_trip_depth``): a topic-style task, whose real queries find
their document at rank 30, must not demand rank 10 of its synthetic ones.
Applying filters again first undoes the earlier drops, so settings can be compared on the same run.

Example:
    >>> report = apply_filters(session, run, FilterConfig(round_trip=BM25Retriever.for_corpus(session, corpus)))
    >>> report.kept, report.dropped
    (2840, {'too short': 91, 'near-verbatim copy': 402, 'duplicate': 37, 'round-trip': 1510})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.corpus import corpus_counts
from ferret.core.db.models import GenerationRun, QueryStatus, RetrievalTask, SyntheticQuery
from ferret.core.db.synthetic import documents_by_ids, reason_counts, reset_drops, run_queries, status_counts
from ferret.core.db.task import example_document
from ferret.core.errors import InvalidInputError
from ferret.core.synth.prompt import document_text
from ferret.core.synth.query_text import is_near_verbatim_copy, normalize

Retriever = Callable[[list[str]], list[list[int]]]
"""Queries in; for each query the ids of the best documents of the corpus, best first."""

DROP_TOO_SHORT = "too short"
DROP_TOO_LONG = "too long"
DROP_EXAMPLE_COPY = "copy of an example query"
DROP_NEAR_VERBATIM = "near-verbatim copy"
DROP_DUPLICATE = "duplicate"
DROP_NOT_BEST = "best-of-n: not the best"
DROP_LOW_LOGPROB = "low generator log-probability"

ROUND_TRIP_MIN_K = 10
"""The shallowest derived depth: with the small embedded generator, round trip by the base model at K=10 kept 290 of
1,183 SciFact queries and the trained model beat the base one, where K=1 (Promptagator's, with a large generator)
kept 21 of 719 and lost (benchmarks/RESULTS.md, issue 3)."""
ROUND_TRIP_MAX_K = 100
"""The deepest derived depth, and the depth the round-trip retrievers rank to."""
ROUND_TRIP_REASON = "round-trip"
"""How the reason of a query the round trip dropped begins (``RoundTrip.reason``); what follows is its rank."""
ROUND_TRIP_EXAMPLE_SHARE = 0.75
"""The derived K is the smallest depth at which this share of the task's examples find their own document."""


@dataclass(frozen=True)
class FilterConfig:
    """Which filters run and their thresholds; ``round_trip`` is the retriever for the consistency filter."""

    min_words: int = 3
    max_words: int = 40
    drop_copies: bool = True
    max_span_fraction: float = 0.9
    max_bigram_overlap: float = 0.8
    dedupe: bool = True
    logprob_quantile: float | None = None
    """Drop the queries whose generator log-probability is below this quantile of the run's surviving queries
    (0.25 drops the least likely quarter); queries without one are kept. None: off."""
    round_trip: Retriever | None = None
    round_trip_k: int | None = 1
    """Keep (q, d) when d is in q's top K; None: K from the task's examples (``round_trip_depth``)."""
    best_of_n: bool = False
    batch_size: int = 512


@dataclass
class FilterReport:
    considered: int = 0
    """Usable queries before filtering (failed generations are not considered)."""
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Drops by reason; all round-trip ranks count as 'round-trip'."""
    failed: int = 0
    logprob_threshold: float | None = None
    """The log-probability below which queries were dropped, when that filter ran on queries that had one."""
    round_trip_k: int | None = None
    """The round trip's K, given or derived; None when no round trip ran."""
    example_ranks: list[int | None] | None = None
    """When K was derived: where the round-trip retriever ranked each example's own document (None: deeper)."""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "considered": self.considered, "kept": self.kept, "dropped": dict(self.dropped), "failed": self.failed,
        }  # fmt: skip
        if self.logprob_threshold is not None:
            data["logprob_threshold"] = round(self.logprob_threshold, 4)
        if self.round_trip_k is not None:
            data["round_trip_k"] = self.round_trip_k
        if self.example_ranks is not None:
            data["example_ranks"] = list(self.example_ranks)
        return data

    def round_trip_summary(self) -> str | None:
        """'round trip K=…: why' when K was derived from the examples (for the CLI and logs), else None."""
        if self.example_ranks is None:
            return None
        return f"round trip K={self.round_trip_k}: {round_trip_reason(self.example_ranks)}"


@dataclass(frozen=True)
class RoundTrip:
    """Where a query's own document came in the retriever's ranking: ``rank`` (1-based) or None beyond ``depth``."""

    rank: int | None
    depth: int

    def kept(self, k: int) -> bool:
        return self.rank is not None and self.rank <= k

    @property
    def reason(self) -> str:
        where = f"rank {self.rank}" if self.rank is not None else f"not in top {self.depth}"
        return f"{ROUND_TRIP_REASON}: {where}"


def round_trip_filter(
    queries: Sequence[tuple[str, int]], retriever: Retriever, k: int = 1, *, batch_size: int = 512
) -> list[RoundTrip]:
    """Rank of each (query, document id)'s document among the retriever's results for the query.

    The pair passes when ``result.kept(k)``: its document is in the query's top ``k``.
    """
    if k < 1:
        raise InvalidInputError("The round-trip K must be at least 1.")
    results: list[RoundTrip] = []
    for start in range(0, len(queries), batch_size):
        chunk = queries[start : start + batch_size]
        rankings = retriever([text for text, _ in chunk])
        if len(rankings) != len(chunk):
            raise InvalidInputError(f"The round-trip retriever answered {len(rankings)} queries of {len(chunk)}.")
        for (_, document_id), ranking in zip(chunk, rankings, strict=True):
            rank = next((position for position, found in enumerate(ranking, 1) if found == document_id), None)
            results.append(RoundTrip(rank, len(ranking)))
    return results


def _drop(query: SyntheticQuery, reason: str) -> None:
    query.status = QueryStatus.DROPPED
    query.reason = reason


def length_bounds(task: RetrievalTask) -> dict[str, int]:
    """Query length limits that follow the task's own examples: keyword-style tasks (NFCorpus: "kidney") must
    keep one-word queries, question tasks drop fragments. Zero-shot tasks keep the filter's defaults."""
    lengths = [len(example.query.split()) for example in task.examples]
    if not lengths:
        return {}
    return {"min_words": max(1, min(lengths) // 2), "max_words": max(40, 2 * max(lengths))}


def round_trip_depth(ranks: Sequence[int | None], documents: int, *, share: float = ROUND_TRIP_EXAMPLE_SHARE) -> int:
    """The round trip's K from where the retriever ranks the task's examples' own documents (None: not in its top
    ``ROUND_TRIP_MAX_K``): the smallest depth at which ``share`` of the examples pass, between ``ROUND_TRIP_MIN_K``
    and ``ROUND_TRIP_MAX_K``, and at most a twentieth of a corpus of ``documents`` (a round trip that passes a large
    part of the corpus checks nothing). A filter that would drop the user's own examples is too strict for the task:
    claims name their abstract (rank 1-3, so K stays 10) where topics ("steak") find theirs at rank 30 or beyond.
    Without a ranked example, K is ``ROUND_TRIP_MIN_K``.

    Example:
        >>> round_trip_depth([1, 1, 2, 4], documents=5000), round_trip_depth([3, 25, 41, None], documents=5000)
        (10, 41)
    """
    ceiling = max(ROUND_TRIP_MIN_K, min(ROUND_TRIP_MAX_K, documents // 20))
    if not ranks:
        return ROUND_TRIP_MIN_K
    ordered = sorted(ceiling + 1 if rank is None else rank for rank in ranks)
    needed = ordered[max(0, math.ceil(share * len(ordered)) - 1)]
    return max(ROUND_TRIP_MIN_K, min(ceiling, needed))


def round_trip_reason(ranks: Sequence[int | None]) -> str:
    """Why K is what it is, in words, for logs and the CLI.

    Example:
        >>> round_trip_reason([4, None, 1])
        "the task's examples find their own documents at ranks 1, 4 and beyond 100"
    """
    if not ranks:
        return f"no example names a corpus document, so K is {ROUND_TRIP_MIN_K}"
    found = sorted(rank for rank in ranks if rank is not None)
    words = [str(rank) for rank in found] + [f"beyond {ROUND_TRIP_MAX_K}"] * (len(ranks) - len(found))
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return f"the task's examples find their own documents at ranks {listed}"


def example_round_trip(session: Session, run: GenerationRun, retriever: Retriever) -> list[int | None]:
    """Where ``retriever`` ranks each example's own corpus document for the example's query (examples given as text
    only have no rank and are left out)."""
    pairs = [
        (example.query, document.id)
        for example in run.task.examples
        if (document := example_document(session, run.task, example)) is not None
    ]
    return [trip.rank for trip in round_trip_filter(pairs, retriever, 1)]


def length_reason(text: str, config: FilterConfig) -> str | None:
    words = len(text.split())
    if words < config.min_words:
        return DROP_TOO_SHORT
    if words > config.max_words:
        return DROP_TOO_LONG
    return None


def apply_filters(session: Session, run: GenerationRun, config: FilterConfig) -> FilterReport:
    """Filter the usable queries of ``run`` (after undoing earlier drops) and report counts by reason.

    Changes are flushed, not committed: the caller's transaction decides.
    """
    if config.best_of_n and config.round_trip is None:
        raise InvalidInputError("Best-of-n picks by round-trip rank; give a round-trip retriever as well.")
    if config.min_words > config.max_words:
        raise InvalidInputError("The minimum query length must not exceed the maximum.")
    if config.logprob_quantile is not None and not 0.0 < config.logprob_quantile < 1.0:
        raise InvalidInputError("The log-probability quantile must be above 0 and below 1.")
    reset_drops(session, run)
    queries = run_queries(session, run, [QueryStatus.OK])
    report = FilterReport(considered=len(queries))

    alive = _filter_by(queries, lambda query: length_reason(query.text, config))
    if config.drop_copies:
        alive = _drop_copies(session, run, alive, config)
    if config.dedupe:
        alive = _drop_duplicates(alive)
    if config.logprob_quantile is not None:
        report.logprob_threshold = logprob_threshold([q.logprob for q in alive], config.logprob_quantile)
        alive = _drop_unlikely(alive, report.logprob_threshold)
    if config.round_trip is not None:
        k = config.round_trip_k
        if k is None:
            report.example_ranks = example_round_trip(session, run, config.round_trip)
            k = round_trip_depth(report.example_ranks, corpus_counts(session, run.task.corpus)[0])
        report.round_trip_k = k
        trips = round_trip_filter(
            [(query.text, query.document_id) for query in alive], config.round_trip, k, batch_size=config.batch_size
        )
        passed: list[SyntheticQuery] = []
        for query, trip in zip(alive, trips, strict=True):
            query.score = float(trip.rank) if trip.rank is not None else None
            if trip.kept(k):
                passed.append(query)
            else:
                _drop(query, trip.reason)
        alive = passed
    if config.best_of_n:
        alive = _best_of_n(alive)
    session.flush()

    report.kept = len(alive)
    report.dropped = reason_counts(session, run, QueryStatus.DROPPED)
    report.failed = status_counts(session, run).get(QueryStatus.FAILED.value, 0)
    return report


def _filter_by(
    queries: list[SyntheticQuery], reason_of: Callable[[SyntheticQuery], str | None]
) -> list[SyntheticQuery]:
    kept: list[SyntheticQuery] = []
    for query in queries:
        reason = reason_of(query)
        if reason is None:
            kept.append(query)
        else:
            _drop(query, reason)
    return kept


def _example_queries(task: RetrievalTask) -> set[str]:
    return {normalize(example.query) for example in task.examples}


def _drop_copies(
    session: Session, run: GenerationRun, queries: list[SyntheticQuery], config: FilterConfig
) -> list[SyntheticQuery]:
    examples = _example_queries(run.task)
    texts: dict[int, str] = {}
    document_ids = sorted({query.document_id for query in queries})
    for start in range(0, len(document_ids), 500):
        for document in documents_by_ids(session, document_ids[start : start + 500]):
            texts[document.id] = document_text(document.title, document.body)

    def reason_of(query: SyntheticQuery) -> str | None:
        if normalize(query.text) in examples:
            return DROP_EXAMPLE_COPY
        copied = is_near_verbatim_copy(
            query.text,
            texts.get(query.document_id, ""),
            max_span_fraction=config.max_span_fraction,
            max_bigram_overlap=config.max_bigram_overlap,
        )
        return DROP_NEAR_VERBATIM if copied else None

    return _filter_by(queries, reason_of)


def logprob_threshold(logprobs: Sequence[float | None], quantile: float) -> float | None:
    """The ``quantile`` of the known log-probabilities (linear interpolation), or None when none is known.

    Derived from the run's own queries because the scale depends on the generator, its prompt and the domain: a
    fixed cut-off that suits SmolLM2 on Wikipedia would drop everything, or nothing, for another model or corpus.

    Example:
        >>> logprob_threshold([-3.0, -1.0, None, -2.0, -0.5], 0.25)
        -2.25
    """
    known = sorted(value for value in logprobs if value is not None)
    if not known:
        return None
    position = quantile * (len(known) - 1)
    low = int(position)
    high = min(low + 1, len(known) - 1)
    return known[low] + (known[high] - known[low]) * (position - low)


def _drop_unlikely(queries: list[SyntheticQuery], threshold: float | None) -> list[SyntheticQuery]:
    if threshold is None:
        return queries
    return _filter_by(
        queries, lambda query: DROP_LOW_LOGPROB if query.logprob is not None and query.logprob < threshold else None
    )


def _drop_duplicates(queries: list[SyntheticQuery]) -> list[SyntheticQuery]:
    """The same normalised text twice, for one document or for two: the first written is kept."""
    seen: set[str] = set()

    def reason_of(query: SyntheticQuery) -> str | None:
        key = normalize(query.text)
        if key in seen:
            return DROP_DUPLICATE
        seen.add(key)
        return None

    return _filter_by(queries, reason_of)


def _best_of_n(queries: list[SyntheticQuery]) -> list[SyntheticQuery]:
    """Per document, the query whose document ranked best (ties: the earlier sample)."""
    best: dict[int, SyntheticQuery] = {}
    for query in queries:
        current = best.get(query.document_id)
        rank = query.score if query.score is not None else float("inf")
        if current is None or rank < (current.score if current.score is not None else float("inf")):
            best[query.document_id] = query
    winners = {id(query) for query in best.values()}
    return _filter_by(queries, lambda query: None if id(query) in winners else DROP_NOT_BEST)
