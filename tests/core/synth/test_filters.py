"""Filters of synthetic queries: length, copies, duplicates, round-trip consistency with BM25, best-of-n."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.models import Corpus, Document, GenerationRun, QueryStatus, RetrievalTask, SyntheticQuery
from ferret.core.db.synthetic import create_run, training_pairs
from ferret.core.errors import InvalidInputError
from ferret.core.synth.filters import (
    FilterConfig,
    apply_filters,
    logprob_threshold,
    round_trip_depth,
    round_trip_filter,
    round_trip_reason,
)
from ferret.core.synth.query_text import (
    bigram_overlap,
    clean_generation,
    is_near_verbatim_copy,
    is_verbatim_copy,
    longest_common_span,
    looks_like_query,
    tokens,
)
from ferret.core.synth.retrievers import BM25Retriever
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task

LONG_QUERY = " ".join(["why"] + ["very"] * 40 + ["hot"])


@pytest.fixture
def task(session: Session, corpus: Corpus) -> RetrievalTask:
    examples = [
        ExampleSpec(query="What is the capital of France?", document="d1"),
        ExampleSpec(query="How do plants make sugar?", document="d2"),
    ]
    return create_task(session, TaskSpec(name="facts", corpus="facts", examples=examples))


def _run(session: Session, task: RetrievalTask, queries: Sequence[tuple[str, str]]) -> GenerationRun:
    """A run holding (document title, query) rows in this order; a query starting with '!' is a failed one."""
    run = create_run(session, task, {})
    ids = {title: document_id for document_id, title in session.execute(select(Document.id, Document.title))}
    samples: dict[str, int] = {}
    for title, text in queries:
        sample = samples[title] = samples.get(title, -1) + 1
        failed = text.startswith("!")
        session.add(
            SyntheticQuery(
                run_id=run.id,
                document_id=ids[title],
                sample=sample,
                text=text.lstrip("!"),
                status=QueryStatus.FAILED if failed else QueryStatus.OK,
                reason="empty" if failed else None,
            )
        )
    session.flush()
    return run


def _outcome(session: Session, run: GenerationRun) -> list[tuple[str, str, str | None, float | None]]:
    rows = session.scalars(select(SyntheticQuery).where(SyntheticQuery.run_id == run.id).order_by(SyntheticQuery.id))
    return [(row.text, row.status.value, row.reason, row.score) for row in rows]


def test_length_copy_and_duplicate_filters(session: Session, task: RetrievalTask) -> None:
    run = _run(
        session,
        task,
        [
            ("Paris", "capital city of france"),
            ("Paris", "paris"),
            ("Paris", "what river runs through paris"),
            ("Photosynthesis", "how do plants make sugar"),
            ("Jupiter", "Jupiter is the largest planet of the solar system"),
            ("Jupiter", "largest planet in the solar system"),
            ("Espresso", "how is espresso brewed"),
            ("Espresso", "How is espresso brewed?"),
            ("Volcano", LONG_QUERY),
            ("Chess", "how is espresso brewed"),
            ("Bread", "!"),
        ],
    )

    report = apply_filters(session, run, FilterConfig())

    assert _outcome(session, run) == [
        ("capital city of france", "ok", None, None),
        ("paris", "dropped", "too short", None),
        ("what river runs through paris", "ok", None, None),
        ("how do plants make sugar", "dropped", "copy of an example query", None),
        ("Jupiter is the largest planet of the solar system", "dropped", "near-verbatim copy", None),
        ("largest planet in the solar system", "ok", None, None),
        ("how is espresso brewed", "ok", None, None),
        ("How is espresso brewed?", "dropped", "duplicate", None),
        (LONG_QUERY, "dropped", "too long", None),
        ("how is espresso brewed", "dropped", "duplicate", None),
        ("", "failed", "empty", None),
    ]
    assert report.as_dict() == {
        "considered": 10,
        "kept": 4,
        "dropped": {
            "too short": 1,
            "too long": 1,
            "copy of an example query": 1,
            "near-verbatim copy": 1,
            "duplicate": 2,
        },
        "failed": 1,
    }
    assert len(training_pairs(session, run)) == 4


def test_round_trip_with_bm25_and_best_of_n(session: Session, task: RetrievalTask, corpus: Corpus) -> None:
    run = _run(
        session,
        task,
        [
            ("Paris", "what river runs through paris"),
            ("Photosynthesis", "carbon dioxide gas from yeast"),
            ("Photosynthesis", "how do plants use sunlight"),
            ("Penguins", "how do tides rise and fall"),
            ("Jupiter", "largest planet in the solar system"),
            ("Jupiter", "what has a great red spot"),
        ],
    )
    bm25 = BM25Retriever.for_corpus(session, corpus)

    report = apply_filters(session, run, FilterConfig(round_trip=bm25))

    outcome = _outcome(session, run)
    assert outcome[:3] == [
        ("what river runs through paris", "ok", None, 1.0),
        ("carbon dioxide gas from yeast", "dropped", "round-trip: rank 2", 2.0),  # the bread document comes first
        ("how do plants use sunlight", "ok", None, 1.0),
    ]
    _, status, reason, score = outcome[3]
    assert status == "dropped" and reason is not None and reason.startswith("round-trip: not in top") and score is None
    assert outcome[4:] == [
        ("largest planet in the solar system", "ok", None, 1.0),
        ("what has a great red spot", "ok", None, 1.0),
    ]
    assert report.kept == 4 and report.dropped == {"round-trip": 2}

    # K=2 keeps the rank-2 query; best-of-n then keeps one query per document, the best ranked (ties: the first).
    report = apply_filters(session, run, FilterConfig(round_trip=bm25, round_trip_k=2, best_of_n=True))

    assert [(text, status, reason) for text, status, reason, _ in _outcome(session, run)] == [
        ("what river runs through paris", "ok", None),
        ("carbon dioxide gas from yeast", "dropped", "best-of-n: not the best"),
        ("how do plants use sunlight", "ok", None),
        ("how do tides rise and fall", "dropped", outcome[3][2]),
        ("largest planet in the solar system", "ok", None),
        ("what has a great red spot", "dropped", "best-of-n: not the best"),
    ]
    assert report.kept == 3 and report.dropped == {"round-trip": 1, "best-of-n": 2}


def test_low_generator_logprob_is_dropped_below_the_runs_own_quantile(session: Session, task: RetrievalTask) -> None:
    run = _run(
        session,
        task,
        [
            ("Paris", "what river runs through paris"),
            ("Jupiter", "largest planet in the solar system"),
            ("Espresso", "how is espresso brewed"),
            ("Espresso", "How is espresso brewed?"),  # a duplicate: gone before the quantile is taken
            ("Volcano", "why do volcanoes erupt lava"),
            ("Chess", "what openings suit beginners"),  # no log-probability (an older row): never dropped by it
        ],
    )
    rows = list(session.scalars(select(SyntheticQuery).where(SyntheticQuery.run_id == run.id)))
    for row, logprob in zip(rows, [-0.4, -2.6, -1.0, -9.0, -1.8, None], strict=True):
        row.logprob = logprob

    report = apply_filters(session, run, FilterConfig(logprob_quantile=0.25))

    # Known after the duplicate filter: -0.4, -2.6, -1.0, -1.8 -> the 25% quantile is -2.6 + 0.75 * 0.8 = -2.0.
    assert report.logprob_threshold == pytest.approx(-2.0)
    assert [(text, status, reason) for text, status, reason, _ in _outcome(session, run)] == [
        ("what river runs through paris", "ok", None),
        ("largest planet in the solar system", "dropped", "low generator log-probability"),
        ("how is espresso brewed", "ok", None),
        ("How is espresso brewed?", "dropped", "duplicate"),
        ("why do volcanoes erupt lava", "ok", None),
        ("what openings suit beginners", "ok", None),
    ]
    assert report.as_dict()["logprob_threshold"] == -2.0 and report.kept == 4
    assert logprob_threshold([None, None], 0.5) is None
    with pytest.raises(InvalidInputError, match="quantile"):
        apply_filters(session, run, FilterConfig(logprob_quantile=1.0))


def test_filtering_again_undoes_earlier_drops(session: Session, task: RetrievalTask, corpus: Corpus) -> None:
    run = _run(session, task, [("Penguins", "how do tides rise and fall"), ("Tides", "what pulls the tides")])
    apply_filters(session, run, FilterConfig(round_trip=BM25Retriever.for_corpus(session, corpus)))
    assert [status for _, status, _, _ in _outcome(session, run)] == ["dropped", "ok"]

    report = apply_filters(session, run, FilterConfig())

    assert _outcome(session, run) == [
        ("how do tides rise and fall", "ok", None, None),
        ("what pulls the tides", "ok", None, None),
    ]
    assert report.kept == 2 and report.dropped == {}


def test_round_trip_depth_follows_where_the_examples_find_their_documents() -> None:
    claims = [1, 1, 2, 1, 3, 1, 5, 2]  # each example names its document: the floor of 10 holds
    topics = [3, 25, 41, 60, 70, 80, None, None]  # a topic's own document is one of many
    assert round_trip_depth(claims, documents=5000) == 10
    assert round_trip_depth(topics, documents=5000) == 80  # three in four examples pass at 80
    assert round_trip_depth([*topics[:6], 1, 2], documents=5000) == 60
    assert round_trip_depth([None] * 8, documents=5000) == 100  # the ceiling
    assert round_trip_depth(topics, documents=600) == 30  # at most a twentieth of the corpus
    assert round_trip_depth(topics, documents=40) == 10  # never under the floor
    assert round_trip_depth([], documents=5000) == 10
    reason = round_trip_reason([25, None, 3])
    assert reason == "the task's examples find their own documents at ranks 3, 25 and beyond 100"


def test_round_trip_k_from_the_examples(session: Session, task: RetrievalTask, corpus: Corpus) -> None:
    """No K given: the examples' own documents are ranked first, and K is where they are found (here the floor)."""
    run = _run(
        session,
        task,
        [("Paris", "what river runs through paris"), ("Penguins", "how do tides rise and fall")],
    )
    bm25 = BM25Retriever.for_corpus(session, corpus)

    report = apply_filters(session, run, FilterConfig(round_trip=bm25, round_trip_k=None))

    assert report.example_ranks == [1, 1] and report.round_trip_k == 10
    assert report.as_dict()["round_trip_k"] == 10 and report.as_dict()["example_ranks"] == [1, 1]
    assert report.kept == 1 and report.dropped == {"round-trip": 1}

    # An example given as text only has no corpus document to find: no rank, and K falls back to the floor.
    task.examples[0].document_id = None
    task.examples[0].external_id = None
    task.examples[1].document_id = None
    task.examples[1].external_id = None
    report = apply_filters(session, run, FilterConfig(round_trip=bm25, round_trip_k=None))
    assert report.example_ranks == [] and report.round_trip_k == 10

    # A given K is used as it is, and no examples are ranked.
    report = apply_filters(session, run, FilterConfig(round_trip=bm25, round_trip_k=3))
    assert report.example_ranks is None and report.round_trip_k == 3
    assert report.round_trip_summary() is None  # nothing derived, nothing to explain


def test_round_trip_filter_with_any_retriever() -> None:
    def retriever(queries: list[str]) -> list[list[int]]:
        return [[1, 2], [1, 2], [5]][: len(queries)]

    trips = round_trip_filter([("a", 1), ("b", 2), ("c", 3)], retriever, k=1)

    assert [trip.rank for trip in trips] == [1, 2, None]
    assert [trip.kept(1) for trip in trips] == [True, False, False]
    assert [trip.reason for trip in trips] == ["round-trip: rank 1", "round-trip: rank 2", "round-trip: not in top 1"]
    in_batches_of_one = round_trip_filter([("a", 1), ("b", 2)], retriever, k=2, batch_size=1)
    assert [trip.rank for trip in in_batches_of_one] == [1, 2]
    with pytest.raises(InvalidInputError, match="at least 1"):
        round_trip_filter([], retriever, k=0)
    with pytest.raises(InvalidInputError, match="answered 1 queries of 2"):
        round_trip_filter([("a", 1), ("b", 2)], lambda queries: [[1]])


def test_bad_filter_settings(session: Session, task: RetrievalTask) -> None:
    run = _run(session, task, [])
    with pytest.raises(InvalidInputError, match="round-trip retriever"):
        apply_filters(session, run, FilterConfig(best_of_n=True))
    with pytest.raises(InvalidInputError, match="must not exceed"):
        apply_filters(session, run, FilterConfig(min_words=5, max_words=4))


def test_query_text_helpers() -> None:
    assert clean_generation('  Query: Query: "what is tea?"\n', "Query") == "what is tea?"
    assert clean_generation(" “tea facts” ", "Query") == "tea facts"
    assert clean_generation(' "why is tea green', "Query") == "why is tea green"
    assert clean_generation('what does "chai" mean', "Query") == 'what does "chai" mean'
    assert clean_generation('""', "Query") == ""
    assert looks_like_query("what is tea", "Document", "Query")
    assert not looks_like_query("Document: Tea is a drink", "Document", "Query")
    assert not looks_like_query("what is tea query: more", "Document", "Query")
    assert not looks_like_query("...?!", "Document", "Query")
    assert not looks_like_query("Read the passage and generate a query.", "Document", "Query")

    document = tokens("Jupiter is the largest planet of the solar system, a gas giant.")
    assert longest_common_span(tokens("the largest planet of all"), document) == 4
    assert longest_common_span(tokens("nothing here"), document) == 0
    assert bigram_overlap(tokens("largest planet in the solar system"), document) == pytest.approx(0.6)
    assert bigram_overlap(tokens("jupiter"), document) == 0.0

    text = "Jupiter is the largest planet of the solar system, a gas giant."
    assert is_verbatim_copy("the largest planet of the solar", text)
    assert not is_verbatim_copy("solar system", text)  # a keyword query, not a copy
    assert not is_verbatim_copy("the largest planet in the solar system", text)
    assert is_near_verbatim_copy("Jupiter is the biggest planet of the solar system, a gas giant", text)
    assert not is_near_verbatim_copy("largest planet in the solar system", text)


def test_cli_filter(session: Session, task: RetrievalTask) -> None:
    run = _run(
        session,
        task,
        [("Paris", "what river runs through paris"), ("Penguins", "how do tides rise and fall"), ("Paris", "paris")],
    )
    session.commit()
    runner = CliRunner()

    result = runner.invoke(app, ["task", "filter", "facts", "--retriever", "bm25"])

    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    kept = f"run {run.id}: kept 1 of 3 usable queries; dropped: round-trip 1, too short 1; failed generations: 0"
    assert kept in printed
    assert "round trip K=10: the task's examples find their own documents at ranks 1 and 1" in printed
    wrong = runner.invoke(app, ["task", "filter", "facts", "--run", "999"])
    assert wrong.exit_code == 1 and "Generation run 999 does not exist." in " ".join(wrong.output.split())
