"""Pipelines declared once: their stages, each stage's function, the resources it needs and its worker queue.

Every driver is derived from a ``Pipeline``:

- ``run_in_process`` runs the stages in order in this process (``ferret pipeline run``, the quickstart, benchmarks);
- ``ferret.core.jobs.runner`` runs one stage of a job with its bookkeeping, and every stage in turn in embedded mode
  (no broker);
- ``ferret.workers`` registers one Celery task per stage (``Stage.task``) and routes it to ``Stage.queue``.

A one-step job (an ingest, an index build) is a pipeline of one stage. Adding a pipeline (REALM) or a stage (a
reranker) means writing its functions and one declaration, then listing the pipeline in
``ferret.core.jobs.catalog``. How a face starts a job of it is declared here too (``Pipeline.prepare``): the job
queue's one ``start_job(kind, session, **inputs)`` hands the inputs to it, so no face or queue grows a method per
pipeline. A stage whose function imports the ML stack is named by a ``StageBody`` (its module and function), so a
declaration, which every face reads to start a job, imports none of it.

Example:
    >>> EXAMPLE = Pipeline(
    ...     kind="example",
    ...     stages=(
    ...         Stage("count", count_documents, WorkerQueue.CPU),
    ...         Stage("embed", StageBody("example.stages", "embed"), WorkerQueue.GPU, {Resource.INDEX}),
    ...     ),
    ...     load=ExampleState.from_json,
    ...     dump=ExampleState.to_json,
    ...     job_id=lambda state: state.job_id,
    ... )
"""

from __future__ import annotations

import enum
import importlib
import inspect
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from ferret.core.errors import InvalidInputError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.factory import open_backend
from ferret.core.llm.base import LLMBackend
from ferret.core.llm.factory import build_backend
from ferret.core.progress import CountingProgress, Progress, quiet
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import BaseConnector, ConnectorFactory

S = TypeVar("S")


class WorkerQueue(enum.StrEnum):
    """The kind of worker a stage runs on (``ferret.workers.names`` maps each to its Celery queue)."""

    GPU = "gpu"  # training, embedding, index builds: one task at a time
    LLM = "llm"  # query generation
    CPU = "cpu"  # ingest, chunking, filters


class Resource(enum.StrEnum):
    """What a stage needs besides a session and the settings; the driver opens it and closes it afterwards."""

    LLM = "llm"  # an LLMBackend built from the settings
    INDEX = "index"  # the IndexBackend
    CONNECTORS = "connectors"  # the connector registry (handed in by the runtime)


class MissingResource(RuntimeError):
    """A stage used a resource its declaration does not list."""


@dataclass
class StageContext:
    """What a stage function is given: a session, the settings, a progress callback and its declared resources."""

    session: Session
    settings: FerretSettings
    progress: Progress = quiet
    llm_backend: LLMBackend | None = None
    index_backend: IndexBackend | None = None
    connector_factory: ConnectorFactory | None = None

    @property
    def llm(self) -> LLMBackend:
        return _present(self.llm_backend, Resource.LLM)

    @property
    def backend(self) -> IndexBackend:
        return _present(self.index_backend, Resource.INDEX)

    @property
    def connectors(self) -> ConnectorFactory:
        return _present(self.connector_factory, Resource.CONNECTORS)

    def add_counts(self, **counts: Any) -> None:
        """Counts shown beside a job's progress (documents added, ...); dropped when the progress keeps none."""
        if isinstance(self.progress, CountingProgress):
            self.progress.add_counts(**counts)


_R = TypeVar("_R")


def _present(value: _R | None, resource: Resource) -> _R:
    if value is None:
        raise MissingResource(f"the stage did not declare the {resource.value!r} resource")
    return value


@dataclass(frozen=True)
class StageBody:
    """A stage's function named by its module and name, imported the first time the stage runs.

    Every face that starts, retries or cancels a job reads the job catalogue (``ferret.core.jobs.catalog``), but
    only a worker or a job runner runs a stage; the training and guard stages import torch and transformers, seconds
    that a ``--async`` command waited for (issue 11, item 9). Their declarations name them this way, and
    ``tests/cli/test_startup.py`` checks that the catalogue imports no ML library.

    Example:
        >>> train = StageBody("ferret.core.pipeline.promptagator.stages", "train_stage")
        >>> Stage("train", train, WorkerQueue.GPU)
    """

    module: str
    function: str

    def resolve(self) -> Callable[[StageContext, Any], Any]:
        """The function itself (importing its module on first use)."""
        body = getattr(importlib.import_module(self.module), self.function)
        if not callable(body):
            raise TypeError(f"{self.module}.{self.function} is not a function")
        return body

    def __call__(self, context: StageContext, state: Any) -> Any:
        return self.resolve()(context, state)


@dataclass(frozen=True)
class Stage(Generic[S]):
    """One stage: ``run(context, state)`` returns the state for the next stage (or the job's result); ``run`` is the
    function itself or a ``StageBody`` that names it."""

    name: str
    run: Callable[[StageContext, S], S]
    queue: WorkerQueue
    needs: Collection[Resource] = frozenset()
    task: str = ""
    """The Celery task name; ``Pipeline`` derives ``<task_prefix>.<name>`` when it is empty."""
    share: float = 1.0
    """How long this stage usually takes beside its siblings: a job's overall progress weighs each stage by it, so
    a job whose first stage takes three quarters of its time does not read 15% done when that stage is 90% done."""


@dataclass(frozen=True)
class LaunchContext:
    """What a pipeline's ``prepare`` is given: the caller's session (committed by the queue afterwards), the
    settings, and the connector registry (an ingest checks its source's kind and configuration up front, a source
    sync that the kind can sync)."""

    session: Session
    settings: FerretSettings
    connectors: ConnectorFactory | None = None
    connector_class: Callable[[str], type[BaseConnector]] | None = None
    """The registry's class of a source kind (imports only that connector): checks a capability, builds nothing."""


@dataclass(frozen=True)
class JobLaunch:
    """A job checked and ready to start, before its row exists: bad input is refused with nothing written."""

    corpus_id: int | None
    begin: Callable[[int], tuple[dict[str, Any], dict[str, Any]]]
    """Given the new job's id: the job's ``params`` (what the faces show) and its first stage's payload (JSON)."""


def json_state(data: dict[str, Any]) -> dict[str, Any]:
    """``load`` and ``dump`` of a pipeline whose state is its JSON payload itself (the one-stage corpus jobs)."""
    return dict(data)


def payload_job_id(payload: dict[str, Any]) -> int | None:
    """``job_id`` of such a pipeline: the payload's ``job_id`` (None when it runs without a job row)."""
    return int(payload["job_id"]) if payload.get("job_id") is not None else None


@dataclass(frozen=True)
class Pipeline(Generic[S]):
    """A job kind and its stages in order, with how its state travels as JSON between them."""

    kind: str
    """The job kind (the ``jobs.kind`` column)."""
    stages: tuple[Stage[S], ...]
    load: Callable[[dict[str, Any]], S]
    dump: Callable[[S], dict[str, Any]]
    job_id: Callable[[S], int | None]
    task_prefix: str = "ferret.pipeline"
    counts: Callable[[S], dict[str, Any]] | None = None
    """What the admin shows beside the progress bar, refreshed after every stage; None: nothing."""
    result: Callable[[S, Sequence[str]], dict[str, Any]] | None = None
    """The job's stored result after the stages done so far; None: the state itself."""
    description: str = ""
    prepare: Callable[..., JobLaunch] | None = None
    """How a face starts a job: ``prepare(context: LaunchContext, **inputs) -> JobLaunch`` checks the inputs (keyword
    arguments, the same from the CLI, the API and the admin) and says what the job starts from; None: a pipeline
    that only runs in process."""
    _named: dict[str, Stage[S]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        named = {}
        for stage in self.stages:
            if stage.name in named:
                raise ValueError(f"pipeline {self.kind!r} declares stage {stage.name!r} twice")
            named[stage.name] = stage if stage.task else _with_task(stage, f"{self.task_prefix}.{stage.name}")
        object.__setattr__(self, "_named", named)
        object.__setattr__(self, "stages", tuple(named.values()))

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(self._named)

    def stage(self, name: str) -> Stage[S]:
        try:
            return self._named[name]
        except KeyError:
            raise ValueError(f"unknown stage {name!r} of pipeline {self.kind!r}") from None

    def index(self, name: str) -> int:
        return self.stage_names.index(self.stage(name).name)

    def span(self, name: str) -> tuple[float, float]:
        """Where stage ``name`` starts and ends within the whole job (0 to 1), each stage weighed by its ``share``."""
        shares = [max(stage.share, 0.0) for stage in self.stages]
        total, index = sum(shares) or 1.0, self.index(name)
        start = sum(shares[:index]) / total
        return start, start + shares[index] / total

    def job_result(self, state: S, done: Sequence[str]) -> dict[str, Any]:
        return self.result(state, done) if self.result is not None else self.dump(state)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names ``prepare`` takes besides its context (what ``start_job`` accepts for this kind)."""
        if self.prepare is None:
            return ()
        return tuple(name for name in inspect.signature(self.prepare).parameters if name != "context")

    def launch(self, context: LaunchContext, inputs: Mapping[str, Any]) -> JobLaunch:
        """Check the inputs against ``prepare``'s signature, then prepare the job (one sentence for a mistake)."""
        if self.prepare is None:
            raise InvalidInputError(f"Jobs of kind {self.kind!r} cannot be started on their own.")
        try:
            inspect.signature(self.prepare).bind(context, **inputs)
        except TypeError as error:
            raise InvalidInputError(
                f"A job of kind {self.kind!r} takes the inputs {', '.join(self.inputs)} ({str(error).rstrip('.')})."
            ) from None
        return self.prepare(context, **inputs)


def _with_task(stage: Stage[S], task: str) -> Stage[S]:
    return replace(stage, task=task)


@contextmanager
def open_stage(
    stage: Stage[Any],
    session: Session,
    settings: FerretSettings,
    progress: Progress,
    *,
    connectors: ConnectorFactory | None = None,
) -> Iterator[StageContext]:
    """The context of one stage with the resources it declares, opened from the settings and closed afterwards."""
    with ExitStack() as stack:
        llm = index = None
        if Resource.LLM in stage.needs:
            llm = build_backend(settings)
            stack.callback(llm.close)
        if Resource.INDEX in stage.needs:
            index = open_backend(settings)
            stack.callback(index.close)
        if Resource.CONNECTORS in stage.needs and connectors is None:
            raise MissingResource(f"stage {stage.name!r} needs connectors and none were handed to the job runner")
        yield StageContext(session, settings, progress, llm, index, connectors)


def run_in_process(pipeline: Pipeline[S], state: S, context: StageContext) -> S:
    """Every stage in order in this process, with resources the caller already holds (one session throughout)."""
    for stage in pipeline.stages:
        state = stage.run(context, state)
    return state
