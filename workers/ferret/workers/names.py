"""Queue names and the task routing, derived from the job catalogue (``ferret.core.jobs.catalog``).

One queue per worker kind (after Onyx's ``configs/constants.py``): the GPU trains, embeds and builds indexes at
concurrency 1; the LLM queue generates queries; the CPU queue ingests, chunks and filters. A pipeline is a chain
across them, each stage on the queue its declaration names: Promptagator is generate (llm) → filter (cpu) →
train → guard → index (gpu). Task names are the stages' ``Stage.task`` (``ferret.pipeline.<stage>``,
``ferret.corpus.ingest_source``, ``ferret.corpus.build_index``), stable across releases.
"""

from __future__ import annotations

import enum
import re

from ferret.core.jobs.catalog import JOB_KINDS
from ferret.core.pipeline.declaration import WorkerQueue

WorkerKind = WorkerQueue
"""The worker kinds are the queues a stage can ask for: gpu, llm, cpu."""


class Queue(enum.StrEnum):
    GPU = "ferret.gpu"
    LLM = "ferret.llm"
    CPU = "ferret.cpu"


QUEUE_OF_KIND: dict[WorkerKind, Queue] = {
    WorkerKind.GPU: Queue.GPU,
    WorkerKind.LLM: Queue.LLM,
    WorkerKind.CPU: Queue.CPU,
}

QUEUE_OF_TASK: dict[str, Queue] = {
    stage.task: QUEUE_OF_KIND[stage.queue] for pipeline in JOB_KINDS.values() for stage in pipeline.stages
}
"""Where each task runs; the apps route by it and ``dispatch`` sets it explicitly on every signature."""

DEFAULT_CONCURRENCY: dict[WorkerKind, int | None] = {
    WorkerKind.GPU: 1,  # one model in GPU memory at a time
    WorkerKind.LLM: 2,  # each task already keeps FERRET_LLM_CONCURRENCY requests in flight
    WorkerKind.CPU: None,  # one process per core
}

EXPIRES_S = 24 * 3600
"""A task message not started within a day is dropped (``expires=``): its job is marked failed when revoked."""


def task_id(job_id: int, stage: str, run: int = 0) -> str:
    """Deterministic Celery task ids, so a cancel can revoke every step of a job without asking the backend.

    ``run`` counts the job's retries: workers keep revoked ids for hours, so a retry after a cancel under the same
    ids had each of its tasks dropped as revoked, and the job read "queued" for good."""
    return f"ferret-job-{job_id}-{stage}" if run == 0 else f"ferret-job-{job_id}-r{run}-{stage}"


_TASK_ID = re.compile(r"ferret-job-(?P<job>\d+)-(?:r(?P<run>\d+)-)?[^-]")


def job_of_task_id(celery_id: str) -> int | None:
    """The job of a task id made by ``task_id``; None for any other id."""
    match = _TASK_ID.match(celery_id)
    return int(match["job"]) if match else None


def run_of_task_id(celery_id: str | None) -> int | None:
    """The run (``task_id``'s ``run``) of a task id made by ``task_id``; None for any other id."""
    match = _TASK_ID.match(celery_id or "")
    return int(match["run"] or 0) if match else None


SYNC_DUE_TASK = "ferret.sources.sync_due"
SYNC_DUE_BEAT: dict[str, object] = {"task": SYNC_DUE_TASK, "schedule": 60.0, "options": {"queue": str(Queue.CPU)}}
"""Celery beat's entry for scheduled source syncs (``ferret.workers.tasks.sources``): a look every minute."""
