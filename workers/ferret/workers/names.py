"""Queue and task names, the contract between the process that sends work and the workers that run it.

One queue per worker kind (after Onyx's ``configs/constants.py``): the GPU trains, embeds and builds indexes at
concurrency 1; the LLM queue generates queries; the CPU queue ingests, chunks and filters. A pipeline is a
chain across them: generate (llm) → filter (cpu) → train → guard → index (gpu).
"""

from __future__ import annotations

import enum


class WorkerKind(enum.StrEnum):
    GPU = "gpu"
    LLM = "llm"
    CPU = "cpu"


class Queue(enum.StrEnum):
    GPU = "ferret.gpu"
    LLM = "ferret.llm"
    CPU = "ferret.cpu"


class TaskName(enum.StrEnum):
    GENERATE = "ferret.pipeline.generate"
    FILTER = "ferret.pipeline.filter"
    TRAIN = "ferret.pipeline.train"
    GUARD = "ferret.pipeline.guard"
    INDEX = "ferret.pipeline.index"
    INGEST_SOURCE = "ferret.corpus.ingest_source"
    BUILD_INDEX = "ferret.corpus.build_index"


QUEUE_OF_KIND: dict[WorkerKind, Queue] = {
    WorkerKind.GPU: Queue.GPU,
    WorkerKind.LLM: Queue.LLM,
    WorkerKind.CPU: Queue.CPU,
}

QUEUE_OF_TASK: dict[TaskName, Queue] = {
    TaskName.GENERATE: Queue.LLM,
    TaskName.FILTER: Queue.CPU,
    TaskName.TRAIN: Queue.GPU,
    TaskName.GUARD: Queue.GPU,
    TaskName.INDEX: Queue.GPU,
    TaskName.INGEST_SOURCE: Queue.CPU,
    TaskName.BUILD_INDEX: Queue.GPU,
}
"""Where each task runs; the apps route by it and ``dispatch`` sets it explicitly on every signature."""

PIPELINE_TASKS: tuple[tuple[str, TaskName], ...] = (
    ("generate", TaskName.GENERATE),
    ("filter", TaskName.FILTER),
    ("train", TaskName.TRAIN),
    ("guard", TaskName.GUARD),
    ("index", TaskName.INDEX),
)
"""Pipeline stages (``ferret.core.pipeline.stages.STAGES``) and the tasks that run them, in chain order."""

DEFAULT_CONCURRENCY: dict[WorkerKind, int | None] = {
    WorkerKind.GPU: 1,  # one model in GPU memory at a time
    WorkerKind.LLM: 2,  # each task already keeps FERRET_LLM_CONCURRENCY requests in flight
    WorkerKind.CPU: None,  # one process per core
}

TASK_MODULES: dict[WorkerKind, tuple[str, ...]] = {
    WorkerKind.GPU: ("ferret.workers.tasks.train", "ferret.workers.tasks.guard", "ferret.workers.tasks.index"),
    WorkerKind.LLM: ("ferret.workers.tasks.generate",),
    WorkerKind.CPU: ("ferret.workers.tasks.filter", "ferret.workers.tasks.ingest"),
}
"""The task modules each worker kind imports (and so the tasks it can run)."""

EXPIRES_S = 24 * 3600
"""A task message not started within a day is dropped (``expires=``): its job is marked failed when revoked."""


def task_id(job_id: int, stage: str) -> str:
    """Deterministic Celery task ids, so a cancel can revoke every step of a job without asking the backend."""
    return f"ferret-job-{job_id}-{stage}"
