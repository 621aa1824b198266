"""Index builds on the GPU queue: the pipeline's index/promote stage, and a standalone build of a corpus."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task

from ferret.core.jobs.corpus_jobs import run_index_build_job
from ferret.core.jobs.runner import run_pipeline_step
from ferret.workers.names import TaskName
from ferret.workers.tasks.base import FerretTask, run_step


@shared_task(name=TaskName.INDEX, bind=True, base=FerretTask)
def index(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Pipeline stage ``index``: build the new model's index version and promote it when the guard allows."""
    return run_step(self, partial(run_pipeline_step, stage="index"), payload)


@shared_task(name=TaskName.BUILD_INDEX, bind=True, base=FerretTask)
def build_index(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Embed a corpus with a model version into a new index version (payload: job_id, corpus, model, promote)."""
    return run_step(self, run_index_build_job, payload)
