"""Query generation against a scripted backend: batches, failure reasons, counters, resuming, LLM errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import (
    Corpus,
    Document,
    GenerationRun,
    GenerationState,
    QueryStatus,
    RetrievalTask,
    SyntheticQuery,
)
from ferret.core.db.synthetic import list_runs, training_pairs
from ferret.core.errors import InvalidInputError
from ferret.core.llm.base import Completion, LLMError
from ferret.core.synth.generation import GENERATING, generate, sample_documents
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task

Scripted = Any  # the ScriptedBackend class from conftest


@pytest.fixture
def task(session: Session, corpus: Corpus) -> RetrievalTask:
    task = create_task(
        session,
        TaskSpec(
            name="facts",
            corpus="facts",
            e_doc="Fact",
            e_query="Question",
            examples=[
                ExampleSpec(query="What is the capital of France?", document="d1"),
                ExampleSpec(query="How do plants make sugar?", document="d2"),
            ],
        ),
    )
    session.commit()
    return task


@pytest.fixture
def topical(prompted_document: Callable[[str], str]) -> Callable[[str, int], str]:
    """A query about the prompted document's title, different for each sample."""

    def script(prompt: str, sample: int) -> str:
        title = prompted_document(prompt).split(".")[0]
        return f" what should I know about {title.lower()} {'then' if sample else 'now'}"

    return script


def _queries(session: Session, run: GenerationRun) -> list[SyntheticQuery]:
    return list(session.scalars(select(SyntheticQuery).where(SyntheticQuery.run_id == run.id).order_by("id")))


def _titles(session: Session, run: GenerationRun) -> list[str]:
    rows = session.execute(
        select(Document.title, SyntheticQuery.sample)
        .join(SyntheticQuery, SyntheticQuery.document_id == Document.id)
        .where(SyntheticQuery.run_id == run.id)
        .order_by(SyntheticQuery.id)
    )
    return [title for title, sample in rows if sample == 0]


def test_a_call_carries_as_many_documents_as_the_backend_batches(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    """The embedded generator takes 64 prompts a pass on a GPU: 8 documents a call would leave it waiting."""
    backend = scripted(topical)
    backend.prompts_per_call = 3

    generate(session, task, backend, queries_per_doc=1)

    assert [len(call["prompts"]) for call in backend.calls] == [3, 3, 3, 1]


def test_documents_are_prompted_shortest_first_over_the_whole_run(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    """Batches of prompts alike in length leave the generator little padding to compute."""
    backend = scripted(topical)

    run = generate(session, task, backend, queries_per_doc=1, batch_size=1)

    lengths = {title: len(title) + len(body) for title, body in session.execute(select(Document.title, Document.body))}
    prompted = [lengths[title] for title in _titles(session, run)]
    assert len(prompted) == 10 and prompted == sorted(prompted)


def test_generates_every_document_in_batches(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    backend = scripted(topical)
    progress: list[tuple[str, float]] = []

    run = generate(session, task, backend, queries_per_doc=2, batch_size=4, progress=lambda *p: progress.append(p))

    assert run.state is GenerationState.SUCCEEDED and run.finished_at is not None
    assert [len(call["prompts"]) for call in backend.calls] == [4, 4, 2]
    assert all(call["n"] == 2 and call["temperature"] == 0.7 and call["stop"] == ["\n"] for call in backend.calls)
    assert all(prompt.endswith("\nQuestion:") for call in backend.calls for prompt in call["prompts"])
    assert progress == [(GENERATING, 0.0), (GENERATING, 0.4), (GENERATING, 0.8), (GENERATING, 1.0)]
    queries = _queries(session, run)
    assert len(queries) == 20 and all(query.status is QueryStatus.OK for query in queries)
    assert queries[0].text == "what should I know about paris now"
    assert queries[1].text == "what should I know about paris then"
    counters = run.counters
    assert {key: counters[key] for key in ("documents", "calls", "queries", "failures")} == {
        "documents": 10,
        "calls": 3,
        "queries": 20,
        "failures": {},
    }
    assert counters["completion_tokens"] == sum(len(query.text.split()) for query in queries)
    assert counters["prompt_tokens"] == backend.usage.prompt_tokens > 0
    assert counters["wall_seconds"] >= 0
    assert run.settings == {
        "queries_per_doc": 2,
        "max_documents": None,
        "temperature": 0.7,
        "max_tokens": 48,
        "seed": 0,
        "example_chars": 250,
        "backend": "scripted",
    }
    assert len(training_pairs(session, run)) == 20


def test_failed_generations_keep_their_reason(session: Session, task: RetrievalTask, scripted: Scripted) -> None:
    answers: dict[str, str | Completion] = {
        "Paris": "   ",
        "Photosynthesis": " Fact: Plants are green.",
        "Jupiter": Completion(" what is the largest planet and why is it so", "length", 48),
        "Espresso": " what is the capital of france",
        "Volcano": " Molten rock called magma reaches the surface!",
        "Chess": ' Question: "how does checkmate work"',
        "Penguins": " ?!",
        "Tides": " what pulls the tides Question: and more",
        "Bread": " why does bread dough rise",
        "Glaciers": " how do glaciers carve valleys",
    }

    def script(prompt: str, sample: int) -> str | Completion:
        return answers[prompt.splitlines()[-2].split(": ", 1)[1].split(".")[0]]

    run = generate(session, task, scripted(script), queries_per_doc=1)

    outcome = {
        title: (query.status.value, query.reason, query.text)
        for title, query in zip(_titles(session, run), _queries(session, run), strict=True)
    }
    assert outcome == {
        "Paris": ("failed", "empty", ""),
        "Photosynthesis": ("failed", "no query", "Fact: Plants are green."),
        "Jupiter": ("failed", "run-on", "what is the largest planet and why is it so"),
        "Espresso": ("failed", "copy of an example query", "what is the capital of france"),
        "Volcano": ("failed", "verbatim copy of the document", "Molten rock called magma reaches the surface!"),
        "Chess": ("ok", None, "how does checkmate work"),
        "Penguins": ("failed", "no query", "?!"),
        "Tides": ("failed", "no query", "what pulls the tides Question: and more"),
        "Bread": ("ok", None, "why does bread dough rise"),
        "Glaciers": ("ok", None, "how do glaciers carve valleys"),
    }
    assert run.counters["queries"] == 3
    assert run.counters["failures"] == {
        "empty": 1,
        "no query": 3,
        "run-on": 1,
        "copy of an example query": 1,
        "verbatim copy of the document": 1,
    }


def test_an_interrupted_run_resumes_with_only_the_missing_documents(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    with pytest.raises(KeyboardInterrupt):
        generate(session, task, scripted(topical, fail_on={2: KeyboardInterrupt()}), queries_per_doc=2, batch_size=4)

    (run,) = list_runs(session, task)
    assert run.state is GenerationState.INTERRUPTED and run.error == "interrupted"
    assert len(_queries(session, run)) == 8  # the first batch, committed
    assert run.counters["documents"] == 4 and run.counters["calls"] == 1

    backend = scripted(topical)
    resumed = generate(session, task, backend, queries_per_doc=2, batch_size=4)

    assert resumed.id == run.id
    assert resumed.state is GenerationState.SUCCEEDED and resumed.error is None
    first_batch = {title for title in _titles(session, run)[:4]}
    asked = [prompt.splitlines()[-2] for call in backend.calls for prompt in call["prompts"]]
    assert len(asked) == 6 and not any(line.split(": ", 1)[1].split(".")[0] in first_batch for line in asked)
    queries = _queries(session, resumed)
    assert len(queries) == 20
    assert len({(query.document_id, query.sample) for query in queries}) == 20
    assert resumed.counters["documents"] == 10 and resumed.counters["calls"] == 3 and resumed.counters["queries"] == 20


def test_an_llm_error_fails_the_run_keeps_its_batches_and_is_raised(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    backend = scripted(topical, fail_on={3: LLMError("The endpoint http://llm:8000 is unreachable.")})
    with pytest.raises(LLMError, match="unreachable"):
        generate(session, task, backend, queries_per_doc=1, batch_size=3)

    (run,) = list_runs(session, task)
    assert run.state is GenerationState.FAILED
    assert run.error == "The endpoint http://llm:8000 is unreachable."
    assert len(_queries(session, run)) == 6 and run.counters["documents"] == 6

    assert generate(session, task, scripted(topical), queries_per_doc=1, batch_size=3).id == run.id
    assert len(_queries(session, run)) == 10


def test_a_bug_fails_the_run_with_its_type(session: Session, task: RetrievalTask, scripted: Scripted) -> None:
    def broken(prompt: str, sample: int) -> str:
        raise ValueError("bad script")

    with pytest.raises(ValueError):
        generate(session, task, scripted(broken))
    (run,) = list_runs(session, task)
    assert run.state is GenerationState.FAILED and run.error == "ValueError: bad script"


def test_a_finished_run_or_other_settings_start_a_new_run(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    first = generate(session, task, scripted(topical), queries_per_doc=1, max_documents=3)
    second = generate(session, task, scripted(topical), queries_per_doc=1, max_documents=3)
    assert second.id != first.id
    with pytest.raises(KeyboardInterrupt):
        generate(session, task, scripted(topical, fail_on={1: KeyboardInterrupt()}), queries_per_doc=1)
    third = generate(session, task, scripted(topical), queries_per_doc=2)
    assert third.id not in (first.id, second.id) and len(list_runs(session, task)) == 4
    fresh = generate(session, task, scripted(topical), queries_per_doc=1, max_documents=3, fresh=True)
    assert fresh.id == 5


def test_the_document_cap_is_a_seeded_sample(
    session: Session, task: RetrievalTask, scripted: Scripted, topical: Callable[[str, int], str]
) -> None:
    assert sample_documents(range(1, 101), 5, seed=3) == sample_documents(list(range(100, 0, -1)), 5, seed=3)
    assert sample_documents(range(1, 101), 5, seed=3) != sample_documents(range(1, 101), 5, seed=4)
    assert sample_documents([3, 1, 2], None, seed=0) == [1, 2, 3]

    backend = scripted(topical)
    run = generate(session, task, backend, queries_per_doc=1, max_documents=4, batch_size=2)

    documents = {query.document_id for query in _queries(session, run)}
    assert len(documents) == 4 and run.counters["documents"] == 4
    # Batches of similar lengths (the generator computes the padding), each seeded by its first document.
    by_length = sorted(session.scalars(select(Document).where(Document.id.in_(documents))), key=_length)
    assert [call["seed"] for call in backend.calls] == [by_length[0].id, by_length[2].id]
    prompted = [len(prompt) for call in backend.calls for prompt in call["prompts"]]
    assert prompted == sorted(prompted)


def _length(document: Document) -> int:
    return len(document.title) + len(document.body)


def test_zero_shot_prompts(session: Session, corpus: Corpus, scripted: Scripted) -> None:
    task = create_task(session, TaskSpec(name="zero", corpus="facts", zero_shot=True))
    backend = scripted(lambda prompt, sample: " where do penguins live")

    generate(session, task, backend, queries_per_doc=1, max_documents=1)

    (prompt,) = backend.calls[0]["prompts"]
    assert prompt.endswith(". Read the passage and generate a query.\nQuery:") and prompt.count("\n") == 1


def test_bad_overrides(session: Session, task: RetrievalTask, scripted: Scripted) -> None:
    backend = scripted(lambda prompt, sample: "q")
    with pytest.raises(InvalidInputError, match="between 1 and 8"):
        generate(session, task, backend, queries_per_doc=9)
    with pytest.raises(InvalidInputError, match="at least 1"):
        generate(session, task, backend, max_documents=0)
    assert backend.calls == []
