"""What every Ferret task shares: late acknowledgement, retries of transient errors, the job's bookkeeping.

The runners of ``ferret.core.jobs`` record progress, errors and cancels in the job row; this module turns their
outcome into Celery's terms: a transient error is retried with backoff (the same message, so the chain goes on
afterwards), a stopped job (cancelled, or already finished) ends the task as ignored, which also ends the chain,
and a task killed at its hard time limit marks its job failed from the worker's main process.

Example (what ``ferret.workers.tasks.table`` does for every declared stage):
    >>> @shared_task(name="ferret.pipeline.train", bind=True, base=FerretTask)
    ... def train(self: FerretTask, payload: dict[str, Any]) -> dict[str, Any]:
    ...     return run_step(self, partial(run_job_step, pipeline=PROMPTAGATOR, stage="train"), payload)
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from celery import Task
from celery.exceptions import Ignore, TimeLimitExceeded
from celery.signals import task_revoked

from ferret.core.db.engine import session_scope
from ferret.core.db.job import cancel_requested, fail_job, mark_cancelled
from ferret.core.jobs.progress import JobStopped
from ferret.core.jobs.runner import describe_error, is_transient
from ferret.core.settings import FerretSettings, get_settings
from ferret.workers.names import job_of_task_id

logger = logging.getLogger(__name__)

RETRY_BACKOFF_S = (30, 120, 300)
"""Pause before each retry of a transient failure (the database or the LLM endpoint coming back)."""


class Step(Protocol):
    def __call__(self, settings: FerretSettings, payload: dict[str, Any], *, retry: bool) -> dict[str, Any]: ...


class FerretTask(Task):  # celery ships no type information: Task is Any to mypy
    """Base of every Ferret task: idempotent work, acknowledged late, redelivered when its worker dies."""

    acks_late = True
    reject_on_worker_lost = True
    max_retries = len(RETRY_BACKOFF_S)

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """A hard time limit kills the pool process before the runner can write: record it from here."""
        if not isinstance(exc, TimeLimitExceeded):
            return
        job_id = _job_id(args, kwargs)
        if job_id is None:
            return
        try:
            with session_scope(get_settings().database_url) as session:
                fail_job(session, job_id, describe_error(exc))
        except Exception:  # the bookkeeping must never take the worker down
            logger.exception("could not mark job %s failed after its time limit", job_id)


def _job_id(args: Any, kwargs: Any) -> int | None:
    payload = (args[0] if args else None) or (kwargs or {}).get("payload")
    if isinstance(payload, dict) and payload.get("job_id") is not None:
        return int(payload["job_id"])
    return None


def run_step(task: FerretTask, step: Step, payload: dict[str, Any]) -> dict[str, Any]:
    """Run a job step in this worker and translate its outcome for Celery (see the module docstring)."""
    retries = int(task.request.retries or 0)
    will_retry = retries < task.max_retries and not task.request.called_directly
    try:
        return step(get_settings(), payload, retry=will_retry)
    except JobStopped as stopped:
        logger.info("%s", stopped)
        raise Ignore() from stopped
    except Exception as error:
        if will_retry and is_transient(error):
            raise task.retry(exc=error, countdown=RETRY_BACKOFF_S[retries]) from error
        raise


@task_revoked.connect
def _dropped(request: Any = None, expired: bool = False, terminated: bool = False, **_: Any) -> None:
    """A message the worker drops never runs, so its job ends here, saying why: past its ``expires=`` the job fails;
    revoked by a cancel (a stage waiting in its queue while the stage before it had finished) the job is cancelled.
    Without this the row would read "running" for good, and neither a cancel nor a retry could end it."""
    if request is None or terminated:
        return
    job_id = _job_id(getattr(request, "args", None), getattr(request, "kwargs", None)) or job_of_task_id(
        str(getattr(request, "id", "") or "")
    )
    if job_id is None:
        return
    try:
        with session_scope(get_settings().database_url) as session:
            if expired:
                fail_job(session, job_id, "The job waited in the queue past its expiry; start a worker for its queue.")
            elif cancel_requested(session, job_id):
                mark_cancelled(session, job_id)
    except Exception:
        logger.exception("could not record the dropped task of job %s", job_id)
