"""One step of a job, with its bookkeeping: the same functions run in a Celery worker and in embedded mode.

A step is one stage of a declared pipeline (``ferret.core.pipeline.declaration``; a one-step job is a pipeline of
one stage). It checks that the job may still run (not cancelled, not finished), counts the delivery in
``attempts``, opens the resources the stage declares, reports progress through ``JobProgress`` and records how it
ended: the job's last error for a transient failure that the worker will retry, ``failed`` for anything else,
``cancelled`` at a cancel. Every stage is idempotent, so a redelivered step simply runs again.

Example:
    >>> payload = run_job_step(settings, state.to_json(), pipeline=PROMPTAGATOR, stage="generate")
    >>> run_job(settings, PROMPTAGATOR, state.to_json())  # embedded mode: every stage in turn, in this process
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError

from ferret.core.db.engine import session_scope
from ferret.core.db.job import (
    FINISHED_STATES,
    cancel_requested,
    fail_job,
    finish_job,
    get_job,
    mark_cancelled,
    record_error,
    save_result,
    start_attempt,
    update_progress,
)
from ferret.core.db.models import JobState
from ferret.core.errors import FerretError
from ferret.core.jobs.progress import JobCancelled, JobProgress, JobStopped
from ferret.core.llm.base import LLMError
from ferret.core.pipeline.declaration import Pipeline, open_stage
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import ConnectorFactory

logger = logging.getLogger(__name__)

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,  # the database went away or was locked for too long
    InterfaceError,
    ConnectionError,
    TimeoutError,
    LLMError,  # the endpoint kept failing after the backend's own retries: it may be back in a minute
)
"""Failures worth another delivery of the same step after a pause; anything else fails the job at once."""


MAX_DELIVERIES_PER_STAGE = 5
"""Deliveries a job may use per stage on average: retries of transient errors and redeliveries after a worker
died all count (``Job.attempts``)."""


def is_transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT_ERRORS)


ERROR_CHARS = 300
"""A bug's message is cut to its first line and this many characters in the job's row (a database error carries its
SQL and parameters: kilobytes); the whole traceback is in the worker's log."""


def describe_error(error: BaseException) -> str:
    """The one line stored as the job's error: a user error's sentence, else the exception type and the first line
    of its message, cut at ``ERROR_CHARS`` (the traceback goes to the log)."""
    if isinstance(error, FerretError):
        return str(error)
    if type(error).__name__ in ("SoftTimeLimitExceeded", "TimeLimitExceeded"):
        return "The step ran past its time limit; raise FERRET_TASK_TIME_LIMIT_S or give the job less work."
    lines = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


@contextmanager
def job_step(
    settings: FerretSettings,
    job_id: int,
    stage: str,
    *,
    stage_index: int = 0,
    stage_count: int = 1,
    span: tuple[float, float] | None = None,
    retry: bool = False,
) -> Iterator[JobProgress]:
    """Bookkeeping around one step; ``retry`` says whether a transient failure will be delivered again."""
    url = settings.database_url
    with session_scope(url) as session:
        job = get_job(session, job_id)
        if job.state in FINISHED_STATES and job.state != JobState.CANCELLED:
            raise JobStopped(job_id, f"Job {job_id} already {job.state.value}.")
        if cancel_requested(session, job_id):
            mark_cancelled(session, job_id)
            session.commit()
            raise JobCancelled(job_id)
        if job.attempts >= MAX_DELIVERIES_PER_STAGE * stage_count:
            # A worker that dies on every delivery (out of memory, a crash in native code) would loop forever.
            message = f"Job {job_id} was delivered {job.attempts} times; its worker keeps dying (out of memory?)."
            fail_job(session, job_id, message)
            session.commit()  # raising below rolls back whatever is not committed
            raise JobStopped(job_id, message)
        start_attempt(session, job_id, stage)
    progress = JobProgress(url, job_id, stage=stage, stage_index=stage_index, stage_count=stage_count, span=span)
    try:
        progress.flush()  # the stage is visible at once, and a cancel since the check above stops it here
        yield progress
    except JobCancelled:
        with session_scope(url) as session:
            mark_cancelled(session, job_id)
        raise
    except BaseException as error:
        with session_scope(url) as session:
            if retry and is_transient(error):
                record_error(session, job_id, f"{describe_error(error)} (retrying)")
            else:
                fail_job(session, job_id, describe_error(error))
        raise


def run_job_step(
    settings: FerretSettings,
    payload: dict[str, Any],
    *,
    pipeline: Pipeline[Any],
    stage: str,
    connectors: ConnectorFactory | None = None,
    retry: bool = False,
) -> dict[str, Any]:
    """Run one stage of a job and return the state for the next one (both as JSON).

    After the stage the job's result is saved (``finish_job`` after the last stage), and, for a pipeline that shows
    counts, its progress is set to the end of the stage.
    """
    state = pipeline.load(payload)
    job_id = pipeline.job_id(state)
    if job_id is None:
        raise ValueError("a job step needs the job id in its payload")
    declared = pipeline.stage(stage)
    index, count, span = pipeline.index(stage), len(pipeline.stages), pipeline.span(stage)
    url = settings.database_url
    with job_step(
        settings, job_id, declared.name, stage_index=index, stage_count=count, span=span, retry=retry
    ) as progress:
        if pipeline.counts is not None:
            progress.add_counts(**pipeline.counts(state))
        with (
            session_scope(url) as session,
            open_stage(declared, session, settings, progress, connectors=connectors) as context,
        ):
            state = declared.run(context, state)
    result = pipeline.job_result(state, pipeline.stage_names[: index + 1])
    with session_scope(url) as session:
        if pipeline.counts is not None:
            # No cancel check now: the stage's work is done and committed (a cancel stops the next stage).
            done = {**progress.counts, **pipeline.counts(state), "activity": f"{stage} done", "stage_progress": 1.0}
            update_progress(session, job_id, progress=span[1], counts=done)
        if index == count - 1:
            finish_job(session, job_id, result)
        else:
            save_result(session, job_id, result)
    return pipeline.dump(state)


def run_job(
    settings: FerretSettings,
    pipeline: Pipeline[Any],
    payload: dict[str, Any],
    *,
    connectors: ConnectorFactory | None = None,
) -> None:
    """Embedded mode (no broker): every stage of the job in turn in this process, as the workers would run them.

    Errors are already recorded in the job row; here they are only logged.
    """
    try:
        for stage in pipeline.stage_names:
            payload = run_job_step(settings, payload, pipeline=pipeline, stage=stage, connectors=connectors)
    except FerretError as stopped:  # JobStopped included: cancelled, or finished meanwhile
        logger.info("job %s stopped: %s", payload.get("job_id"), stopped)
    except Exception:
        logger.exception("job %s failed", payload.get("job_id"))
