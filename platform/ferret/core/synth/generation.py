"""Synthetic query generation for a task's documents (Promptagator, Dai et al. 2022, section 3.1).

Documents are sampled up to a cap with a fixed seed and prompted in batches; each batch and its queries are
committed in their own transaction, so an interruption loses at most one batch. Running the task again with the
same settings resumes its unfinished run (the same row; only the documents without queries are prompted).
Every sample is kept: a usable query with status ``ok``, or a failed generation with its reason.

Example:
    >>> run = generate(session, get_task(session, "scifact-claims"), backend, max_documents=500)
    >>> run.state, run.counters["failures"]
    (<GenerationState.SUCCEEDED: 'succeeded'>, {'run-on': 61, 'copy of an example query': 18})
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.models import (
    Document,
    GenerationRun,
    GenerationState,
    QueryStatus,
    RetrievalTask,
    SyntheticQuery,
    utcnow,
)
from ferret.core.db.synthetic import (
    corpus_document_ids,
    create_run,
    document_lengths,
    documents_by_ids,
    generated_document_ids,
    resumable_run,
    run_owner,
)
from ferret.core.db.task import example_document
from ferret.core.errors import InvalidInputError
from ferret.core.llm.base import Completion, LLMBackend, LLMError
from ferret.core.progress import Progress, quiet
from ferret.core.synth.prompt import PromptBudget, PromptBuilder, document_text
from ferret.core.synth.query_text import clean_generation, is_verbatim_copy, looks_like_query, normalize
from ferret.core.synth.task_spec import MAX_QUERIES_PER_DOC, GenerationSettings, task_generation_settings

FAILURE_EMPTY = "empty"
FAILURE_NO_QUERY = "no query"
FAILURE_RUN_ON = "run-on"
FAILURE_EXAMPLE_COPY = "copy of an example query"
FAILURE_DOCUMENT_COPY = "verbatim copy of the document"
GENERATING = "generating queries"
"""The activity generation reports progress under."""
STOP = ("\n",)  # one query per line: the next line would be a new field

"""Called with (documents done, documents in the run) after each batch."""


@dataclass
class GenerationCounters:
    """What a run did, summed over its resumptions; stored as the run's ``counters``."""

    documents: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queries: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationCounters:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        # A copy: mutating the loaded JSON in place would hide the change from SQLAlchemy's comparison.
        known["failures"] = dict(known.get("failures") or {})
        return cls(**known)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["wall_seconds"] = round(self.wall_seconds, 3)
        return data


@dataclass(frozen=True)
class Judgement:
    text: str
    failure: str | None


def judge_completion(
    completion: Completion, *, document: str, example_queries: set[str], e_doc: str, e_query: str
) -> Judgement:
    """The cleaned query of a completion, or why the generation failed (first reason that applies)."""
    text = clean_generation(completion.text, e_query)
    if not text:
        return Judgement(completion.text.strip(), FAILURE_EMPTY)
    if not looks_like_query(text, e_doc, e_query):
        return Judgement(text, FAILURE_NO_QUERY)
    if completion.finish_reason == "length":
        return Judgement(text, FAILURE_RUN_ON)
    if normalize(text) in example_queries:
        return Judgement(text, FAILURE_EXAMPLE_COPY)
    if is_verbatim_copy(text, document):
        return Judgement(text, FAILURE_DOCUMENT_COPY)
    return Judgement(text, None)


def task_prompt_builder(
    session: Session, task: RetrievalTask, budget: PromptBudget | None = None, *, example_chars: int | None = None
) -> PromptBuilder:
    """The task's prompts, its examples' documents read from the corpus (or their given text)."""
    examples: list[tuple[str, str]] = []
    for example in task.examples:
        if example.document_text is not None:
            examples.append((example.document_text, example.query))
            continue
        document = example_document(session, task, example)
        if document is None:
            raise InvalidInputError(
                f"Example {example.position} of task {task.name!r} names document {example.external_id!r}, which is "
                f"no longer in its corpus; export the task, fix the example and import it under a new name."
            )
        examples.append((document_text(document.title, document.body), example.query))
    return PromptBuilder(
        task.e_doc, task.e_query, examples, zero_shot=task.zero_shot, budget=budget, example_chars=example_chars
    )


def sample_documents(document_ids: Sequence[int], max_documents: int | None, seed: int) -> list[int]:
    """All documents in id order, or a seeded sample of ``max_documents`` of them (the same on every resume)."""
    ordered = sorted(document_ids)
    if max_documents is None or max_documents >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, max_documents))


def run_settings(
    task: RetrievalTask, *, queries_per_doc: int | None = None, max_documents: int | None = None
) -> GenerationSettings:
    """The task's generation settings with the given overrides."""
    settings = task_generation_settings(task)
    overrides: dict[str, Any] = {}
    if queries_per_doc is not None:
        if not 1 <= queries_per_doc <= MAX_QUERIES_PER_DOC:
            raise InvalidInputError(f"Queries per document must be between 1 and {MAX_QUERIES_PER_DOC}.")
        overrides["queries_per_doc"] = queries_per_doc
    if max_documents is not None:
        if max_documents < 1:
            raise InvalidInputError("The document cap must be at least 1.")
        overrides["max_documents"] = max_documents
    return settings.model_copy(update=overrides)


def generate(
    session: Session,
    task: RetrievalTask,
    backend: LLMBackend,
    *,
    queries_per_doc: int | None = None,
    max_documents: int | None = None,
    batch_size: int | None = None,
    progress: Progress = quiet,
    fresh: bool = False,
    reuse_finished: bool = False,
) -> GenerationRun:
    """Generate queries for the task's documents and return the run (resumed when one is unfinished).

    ``queries_per_doc`` and ``max_documents`` override the task's settings. An ``LLMError`` marks the run failed
    and a ``KeyboardInterrupt`` marks it interrupted; both keep the committed batches and are raised again.
    With ``fresh`` a new run starts even when an unfinished one could be resumed; with ``reuse_finished`` a finished
    run with the same settings is reused too (only documents added since are generated). The session is committed: once
    when the run starts and once per batch (whatever else the caller had pending goes with the first commit).
    ``batch_size`` documents go to the backend per call; default: as many as it takes at once (``prompts_per_call``).
    """
    if batch_size is None:
        batch_size = backend.prompts_per_call
    if batch_size < 1:
        raise InvalidInputError("The batch size must be at least 1.")
    settings = run_settings(task, queries_per_doc=queries_per_doc, max_documents=max_documents)
    builder = task_prompt_builder(
        session, task, PromptBudget(max_new_tokens=settings.max_tokens), example_chars=settings.example_chars
    )
    snapshot = {**settings.model_dump(mode="json"), "backend": getattr(backend, "name", type(backend).__name__)}
    run = None if fresh else resumable_run(session, task, snapshot, include_finished=reuse_finished)
    if run is None:
        run = create_run(session, task, snapshot)
    else:
        run.state, run.error, run.finished_at, run.owner = GenerationState.RUNNING, None, None, run_owner()
    session.commit()

    sample = sample_documents(corpus_document_ids(session, task.corpus_id), settings.max_documents, settings.seed)
    done = generated_document_ids(session, run)
    todo = [document_id for document_id in sample if document_id not in done]
    counters = GenerationCounters.from_dict(run.counters or {})
    wall_before, started = counters.wall_seconds, time.monotonic()
    finished = len(sample) - len(todo)
    progress(GENERATING, finished / max(len(sample), 1))
    example_queries = {normalize(query) for _, query in builder.examples}
    usage = getattr(backend, "usage", None)
    try:
        for documents in length_sorted_batches(session, todo, batch_size):
            texts = [document_text(document.title, document.body) for document in documents]
            prompt_tokens_before = usage.prompt_tokens if usage is not None else 0
            results = backend.complete(
                builder.build_many(texts),
                n=settings.queries_per_doc,
                temperature=settings.temperature,
                max_tokens=settings.max_tokens,
                stop=STOP,
                seed=settings.seed + documents[0].id,
            )
            if len(results) != len(documents):
                raise LLMError(f"The generator answered {len(results)} prompts of {len(documents)}.")
            counters.calls += 1
            counters.prompt_tokens += (usage.prompt_tokens if usage is not None else 0) - prompt_tokens_before
            session.add_all(
                _judged_rows(run, task, documents, texts, results, settings.queries_per_doc, example_queries, counters)
            )
            counters.documents += len(documents)
            counters.wall_seconds = wall_before + time.monotonic() - started
            run.counters = counters.as_dict()
            session.commit()  # one transaction per batch: an interruption loses at most this batch
            finished += len(documents)
            progress(GENERATING, finished / max(len(sample), 1))
    except KeyboardInterrupt:
        _close(session, run, wall_before, started, GenerationState.INTERRUPTED, "interrupted")
        raise
    except BaseException as error:
        message = str(error) if isinstance(error, LLMError) else f"{type(error).__name__}: {error}"
        _close(session, run, wall_before, started, GenerationState.FAILED, message)
        raise
    _close(session, run, wall_before, started, GenerationState.SUCCEEDED, None)
    return run


def length_sorted_batches(session: Session, document_ids: Sequence[int], batch_size: int) -> Iterator[list[Document]]:
    """The documents of ``document_ids`` in batches of ``batch_size``, shortest first over the whole list.

    A batch's prompts are alike in length, so the generator computes little padding. Sorting all the documents,
    not windows of 8 batches as before, cut the padding of the quickstart's prompts from 33% to 21% of their tokens
    (benchmarks/RESULTS.md, issue 12, twenty-fifth session). Only the lengths are read up front; each batch's
    documents are read when it is due."""
    lengths = document_lengths(session, document_ids)
    ordered = sorted(lengths, key=lambda document_id: (lengths[document_id], document_id))
    for start in range(0, len(ordered), batch_size):
        yield documents_by_ids(session, ordered[start : start + batch_size])


def _judged_rows(
    run: GenerationRun,
    task: RetrievalTask,
    documents: Sequence[Document],
    texts: Sequence[str],
    results: Sequence[Sequence[Completion]],
    queries_per_doc: int,
    example_queries: set[str],
    counters: GenerationCounters,
) -> list[SyntheticQuery]:
    """One row per completion, usable or failed with its reason; the counters follow."""
    rows: list[SyntheticQuery] = []
    for document, text, completions in zip(documents, texts, results, strict=True):
        for sample_index, completion in enumerate(completions[:queries_per_doc]):
            judgement = judge_completion(
                completion, document=text, example_queries=example_queries, e_doc=task.e_doc, e_query=task.e_query
            )
            counters.completion_tokens += completion.completion_tokens
            if judgement.failure is None:
                counters.queries += 1
            else:
                counters.failures[judgement.failure] = counters.failures.get(judgement.failure, 0) + 1
            rows.append(
                SyntheticQuery(
                    run_id=run.id,
                    document_id=document.id,
                    sample=sample_index,
                    text=judgement.text,
                    status=QueryStatus.OK if judgement.failure is None else QueryStatus.FAILED,
                    reason=judgement.failure,
                    logprob=completion.logprob,
                )
            )
    return rows


def _close(
    session: Session,
    run: GenerationRun,
    wall_before: float,
    started: float,
    state: GenerationState,
    error: str | None,
) -> None:
    """Record how the run ended, with the counters of the committed batches (the one in flight is dropped)."""
    session.rollback()
    committed = GenerationCounters.from_dict(run.counters or {})
    committed.wall_seconds = wall_before + time.monotonic() - started
    run.counters = committed.as_dict()
    run.state, run.error, run.finished_at = state, error, utcnow()
    session.commit()
