"""The promotion guard: the candidate against the active model on held-out queries. Queue ``ferret.gpu``."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task

from ferret.core.jobs.runner import run_pipeline_step
from ferret.workers.names import TaskName
from ferret.workers.tasks.base import FerretTask, run_step


@shared_task(name=TaskName.GUARD, bind=True, base=FerretTask)
def guard(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Pipeline stage ``guard``: takes the pipeline state and returns it for the next stage."""
    return run_step(self, partial(run_pipeline_step, stage="guard"), payload)
