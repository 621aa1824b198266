"""Synthetic queries for a task's documents (resumes its generation run). Queue ``ferret.llm``."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task

from ferret.core.jobs.runner import run_pipeline_step
from ferret.workers.names import TaskName
from ferret.workers.tasks.base import FerretTask, run_step


@shared_task(name=TaskName.GENERATE, bind=True, base=FerretTask)
def generate(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Pipeline stage ``generate``: takes the pipeline state and returns it for the next stage."""
    return run_step(self, partial(run_pipeline_step, stage="generate"), payload)
