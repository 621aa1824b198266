"""One step of a job, with its bookkeeping: the same functions run in a Celery worker and in embedded mode.

A step checks that the job may still run (not cancelled, not finished), counts the delivery in ``attempts``,
reports progress through ``JobProgress`` and records how it ended: the job's last error for a transient failure
that the worker will retry, ``failed`` for anything else, ``cancelled`` at a cancel. The work itself is a stage
of ``ferret.core`` (a pipeline stage, an ingest, an index build), which is idempotent, so a redelivered step
simply runs again.

Example:
    >>> payload = run_pipeline_step(settings, state.to_json(), stage="generate")
    >>> run_pipeline_job(settings, state.to_json())  # embedded mode: every stage in turn, in this process
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

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
from ferret.core.pipeline.stages import STAGES, filter_stage, generate_stage, guard_stage, index_stage, train_stage
from ferret.core.pipeline.state import PipelineState
from ferret.core.settings import FerretSettings

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


def describe_error(error: BaseException) -> str:
    """The one line stored as the job's error: a user error's sentence, else the exception type and message."""
    if isinstance(error, FerretError):
        return str(error)
    if type(error).__name__ in ("SoftTimeLimitExceeded", "TimeLimitExceeded"):
        return "The step ran past its time limit; raise FERRET_TASK_TIME_LIMIT_S or give the job less work."
    return f"{type(error).__name__}: {error}"


@contextmanager
def job_step(
    settings: FerretSettings,
    job_id: int,
    stage: str,
    *,
    stage_index: int = 0,
    stage_count: int = 1,
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
    progress = JobProgress(url, job_id, stage=stage, stage_index=stage_index, stage_count=stage_count)
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


def _run_stage(
    session: Session, settings: FerretSettings, stage: str, state: PipelineState, progress: JobProgress
) -> PipelineState:
    if stage == "generate":
        from ferret.core.llm.factory import build_backend

        llm = build_backend(settings)
        try:
            return generate_stage(session, state, llm, progress)
        finally:
            llm.close()
    if stage == "filter":
        return filter_stage(session, settings, state, progress)
    if stage == "train":
        return train_stage(session, settings, state, progress)
    if stage == "guard":
        return guard_stage(session, settings, state, progress)
    if stage == "index":
        from ferret.core.index.factory import open_backend

        backend = open_backend(settings)
        try:
            return index_stage(session, settings, backend, state, progress)
        finally:
            backend.close()
    raise ValueError(f"unknown pipeline stage {stage!r}")


def _counts(state: PipelineState) -> dict[str, Any]:
    """What the admin shows beside the progress bar."""
    counts: dict[str, Any] = {"model": state.model_name}
    if state.run_id is not None:
        counts["generation_run"] = state.run_id
    if state.filters is not None:
        counts["queries_kept"] = state.filters.get("kept")
        counts["queries_considered"] = state.filters.get("considered")
    if state.guard is not None:
        counts["guard_passed"] = state.guard.get("passed")
    return counts


def run_pipeline_step(
    settings: FerretSettings, payload: dict[str, Any], *, stage: str, retry: bool = False
) -> dict[str, Any]:
    """Run one pipeline stage of a job and return the state for the next one (both as JSON)."""
    state = PipelineState.from_json(payload)
    job_id = state.job_id
    if job_id is None:
        raise ValueError("a pipeline step needs the job id in its state")
    index = STAGES.index(stage)
    with job_step(settings, job_id, stage, stage_index=index, stage_count=len(STAGES), retry=retry) as progress:
        progress.add_counts(**_counts(state))
        with session_scope(settings.database_url) as session:
            state = _run_stage(session, settings, stage, state, progress)
    result = {**state.to_json(), "stages_done": list(STAGES[: index + 1])}
    with session_scope(settings.database_url) as session:
        # No cancel check now: the stage's work is done and committed (a cancel stops the next stage).
        done = {**progress.counts, **_counts(state), "activity": f"{stage} done", "stage_progress": 1.0}
        update_progress(session, job_id, progress=(index + 1) / len(STAGES), counts=done)
        if stage == STAGES[-1]:
            finish_job(session, job_id, result)
        else:
            save_result(session, job_id, result)
    return state.to_json()


def run_pipeline_job(settings: FerretSettings, payload: dict[str, Any]) -> None:
    """Embedded mode: every stage in turn in this process; errors are already recorded in the job row."""
    try:
        for stage in STAGES:
            payload = run_pipeline_step(settings, payload, stage=stage)
    except JobStopped as stopped:
        logger.info("%s", stopped)
    except Exception:
        logger.exception("pipeline job %s failed", payload.get("job_id"))


def run_simple_job(
    settings: FerretSettings,
    job_id: int,
    stage: str,
    work: Callable[[Session, JobProgress], dict[str, Any]],
    *,
    retry: bool = False,
) -> dict[str, Any]:
    """A one-step job (an ingest, an index build): ``work`` returns the job's result."""
    with job_step(settings, job_id, stage, retry=retry) as progress, session_scope(settings.database_url) as session:
        result = work(session, progress)
    with session_scope(settings.database_url) as session:
        finish_job(session, job_id, result)
    return result
