"""Length, copy, duplicate and round-trip filters over the generation run. Queue ``ferret.cpu``."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task

from ferret.core.jobs.runner import run_pipeline_step
from ferret.workers.names import TaskName
from ferret.workers.tasks.base import FerretTask, run_step


@shared_task(name=TaskName.FILTER, bind=True, base=FerretTask)
def filter(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Pipeline stage ``filter``: takes the pipeline state and returns it for the next stage."""
    return run_step(self, partial(run_pipeline_step, stage="filter"), payload)
