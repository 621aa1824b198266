"""Ingestion of one source into a corpus on the CPU queue (chunking; live index versions are kept in sync)."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task

from ferret.connectors.registry import build_connector
from ferret.core.jobs.corpus_jobs import run_ingest_job
from ferret.workers.names import TaskName
from ferret.workers.tasks.base import FerretTask, run_step


@shared_task(name=TaskName.INGEST_SOURCE, bind=True, base=FerretTask)
def ingest_source(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Payload: job_id, corpus, kind (connector kind), config (its JSON config), incremental."""
    return run_step(self, partial(run_ingest_job, connectors=build_connector), payload)
