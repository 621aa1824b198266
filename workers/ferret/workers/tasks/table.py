"""The Celery task table, derived from the job catalogue: one task per stage of every declared pipeline.

A task's name is its stage's ``Stage.task`` (``ferret.pipeline.generate``, ``ferret.corpus.ingest_source``, ...) and
its queue the stage's worker queue. Each worker kind's app registers the tasks of its own queue only
(``register_tasks``), so adding a pipeline or a stage to ``ferret.core.jobs.catalog`` adds its tasks here with
nothing to write.

Example:
    >>> sorted(register_tasks(app, WorkerKind.LLM))
    ['ferret.pipeline.generate']
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from celery import Celery

from ferret.connectors.registry import build_connector
from ferret.core.jobs.catalog import JOB_KINDS
from ferret.core.jobs.runner import run_job_step
from ferret.core.pipeline.declaration import Pipeline, Stage, WorkerQueue
from ferret.workers.tasks.base import FerretTask, run_step


def _runner(pipeline: Pipeline[Any], stage: Stage[Any]) -> Callable[[FerretTask, dict[str, Any]], dict[str, Any]]:
    step = partial(run_job_step, pipeline=pipeline, stage=stage.name, connectors=build_connector)

    def run(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
        return run_step(self, step, payload)

    run.__name__ = run.__qualname__ = stage.name
    run.__doc__ = f"Stage {stage.name!r} of job kind {pipeline.kind!r} on the {stage.queue.value} queue."
    return run


def register_tasks(app: Celery, queue: WorkerQueue | None = None) -> dict[str, Any]:
    """Define on ``app`` the task of every declared stage that runs on ``queue`` (every stage when None)."""
    return {
        # shared=False: Celery otherwise adds a task to every app finalized later in the process (the client app,
        # another worker kind's app), and the next ``register_tasks`` finds its name taken by an older callable.
        stage.task: app.task(name=stage.task, bind=True, base=FerretTask, shared=False)(_runner(pipeline, stage))
        for pipeline in JOB_KINDS.values()
        for stage in pipeline.stages
        if queue is None or stage.queue == queue
    }
