"""The job-queue port: how a face starts, retries and cancels long work without knowing where it runs.

``ferret.workers.dispatch.Dispatcher`` implements it. There is one way to start a job of any kind: ``start_job(kind,
session, **inputs)``; the inputs are those of the kind's declaration (``Pipeline.prepare`` in
``ferret.core.jobs.catalog``), so a new pipeline needs no method here or in the adapter. Where the job runs is the
caller's ``placement``:

- ``QUEUE`` (the HTTP API, the admin): the workers with a broker; a thread of this long-lived process without one;
- ``HERE`` (a CLI command that stays and shows progress): a thread of this process, whatever the broker;
- ``DETACHED`` (``--async`` on the CLI): the workers with a broker; without one, a runner process of its own that
  outlives the command and writes its progress to the job row (``ferret jobs follow`` reads it).

Example:
    >>> job = runtime.jobs.start_job("pipeline", session, task="faq", config=PipelineConfig(promote="force"))
    >>> job = runtime.jobs.start_job("ingest", session, corpus="docs", source_kind="filesystem", config={"root": "/d"})
    >>> runtime.jobs.cancel_job(session, job.id).cancel_requested
    True
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.models import Job


class Placement(enum.StrEnum):
    """Where a started job runs (see the module docstring)."""

    QUEUE = "queue"
    HERE = "here"
    DETACHED = "detached"


class JobQueue(ABC):
    """Starts jobs (each call commits the session and returns the job row), retries and cancels them."""

    @abstractmethod
    def start_job(
        self, kind: str, session: Session, /, *, placement: Placement = Placement.QUEUE, **inputs: Any
    ) -> Job:
        """Start a job of ``kind`` (a key of ``JOB_KINDS``) with the inputs its declaration's ``prepare`` takes.

        Bad inputs raise a one-sentence ``FerretError`` before any row is written."""

    @abstractmethod
    def retry_job(self, session: Session, job_id: int, *, placement: Placement = Placement.QUEUE) -> Job:
        """Run a failed or cancelled job again from its stored payload, as the same job: its stages are idempotent,
        so what the first run finished is found again, not done twice."""

    @abstractmethod
    def cancel_job(self, session: Session, job_id: int, *, force: bool = False) -> Job:
        """Cancel a job: a queued one at once, a running one at its next progress report (``force``: at once)."""

    def wait(self, job_id: int, timeout_s: float | None = None) -> bool:
        """Wait for a job run by a thread of this process; False when it still runs after ``timeout_s``.

        A job sent to workers or to a detached runner is not waited for here: True at once.
        """
        return True
