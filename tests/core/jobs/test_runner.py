"""The bookkeeping of a job step (``ferret.core.jobs.runner``), without Celery: how each ending is recorded.

The steps are the one stage of a pipeline declared here, as a one-step job (an ingest) is declared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from ferret.core.db.engine import session_scope
from ferret.core.db.job import create_job, get_job, request_cancel, start_attempt
from ferret.core.db.models import JobState
from ferret.core.errors import InvalidInputError
from ferret.core.jobs.progress import JobCancelled, JobProgress, JobStopped
from ferret.core.jobs.runner import ERROR_CHARS, MAX_DELIVERIES_PER_STAGE, describe_error, run_job_step
from ferret.core.pipeline.declaration import Pipeline, Stage, StageContext, WorkerQueue
from ferret.core.settings import FerretSettings


def _new_job(settings: FerretSettings) -> int:
    with session_scope(settings.database_url) as session:
        return create_job(session, "ingest").id


def run_step(
    settings: FerretSettings,
    job_id: int,
    work: Callable[[Session, JobProgress], dict[str, Any]],
    *,
    retry: bool = False,
) -> dict[str, Any]:
    """``work`` as the one stage of a one-step job, run like a worker runs it."""

    def stage(context: StageContext, payload: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(context.progress, JobProgress)
        return work(context.session, context.progress)

    pipeline: Pipeline[dict[str, Any]] = Pipeline(
        kind="ingest",
        stages=(Stage("ingest", stage, WorkerQueue.CPU),),
        load=dict,
        dump=dict,
        job_id=lambda payload: int(payload["job_id"]),
    )
    return run_job_step(settings, {"job_id": job_id}, pipeline=pipeline, stage="ingest", retry=retry)


def _job(settings: FerretSettings, job_id: int) -> Any:
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        session.expunge(job)
        return job


def test_a_step_records_its_result(settings: FerretSettings, database_url: str) -> None:
    job_id = _new_job(settings)

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        progress.add_counts(documents=3)
        progress("ingesting", 0.5)
        assert _job(settings, job_id).counts["documents"] == 3
        return {"added": 3}

    assert run_step(settings, job_id, work) == {"added": 3}
    job = _job(settings, job_id)
    assert (job.state, job.result, job.attempts, job.progress) == (JobState.SUCCEEDED, {"added": 3}, 1, 1.0)


def test_a_jobs_progress_weighs_each_stage_by_its_share(settings: FerretSettings, database_url: str) -> None:
    """A first stage of three quarters of the job's time, half done, is 37.5% of the job (not 25%, as two equal
    stages would read); after it, 75%; half the second, 87.5%."""
    job_id = _new_job(settings)
    seen: list[float] = []

    def stage(context: StageContext, payload: dict[str, Any]) -> dict[str, Any]:
        context.progress("working", 0.5)  # a new activity: written at once
        seen.append(_job(settings, job_id).progress)
        return payload

    pipeline: Pipeline[dict[str, Any]] = Pipeline(
        kind="ingest",
        stages=(Stage("long", stage, WorkerQueue.CPU, share=3), Stage("short", stage, WorkerQueue.CPU, share=1)),
        load=dict,
        dump=dict,
        job_id=lambda payload: int(payload["job_id"]),
        counts=lambda payload: {},
    )
    assert pipeline.span("long") == (0.0, 0.75) and pipeline.span("short") == (0.75, 1.0)
    payload = run_job_step(settings, {"job_id": job_id}, pipeline=pipeline, stage="long")
    assert _job(settings, job_id).progress == pytest.approx(0.75)
    run_job_step(settings, payload, pipeline=pipeline, stage="short")
    assert seen == [pytest.approx(0.375), pytest.approx(0.875)]
    assert _job(settings, job_id).progress == pytest.approx(1.0)


def test_a_user_error_fails_the_job_with_its_sentence(settings: FerretSettings, database_url: str) -> None:
    job_id = _new_job(settings)

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        raise InvalidInputError("Folder /nowhere does not exist.")

    with pytest.raises(InvalidInputError):
        run_step(settings, job_id, work, retry=True)  # not transient: no retry
    job = _job(settings, job_id)
    assert job.state == JobState.FAILED and job.error == "Folder /nowhere does not exist."


def test_a_transient_error_that_will_be_retried_keeps_the_job_running(
    settings: FerretSettings, database_url: str
) -> None:
    job_id = _new_job(settings)

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    with pytest.raises(OperationalError):
        run_step(settings, job_id, work, retry=True)
    job = _job(settings, job_id)
    assert job.state == JobState.RUNNING and job.error is not None and job.error.endswith("(retrying)")
    with pytest.raises(OperationalError):
        run_step(settings, job_id, work, retry=False)  # the last delivery
    assert _job(settings, job_id).state == JobState.FAILED


def test_a_cancel_stops_the_step_at_its_next_report(settings: FerretSettings, database_url: str) -> None:
    job_id = _new_job(settings)

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        with session_scope(settings.database_url) as other:
            request_cancel(other, job_id)
        progress("ingesting", 1.0)
        raise AssertionError("the report above must stop the step")

    with pytest.raises(JobCancelled):
        run_step(settings, job_id, work)
    assert _job(settings, job_id).state == JobState.CANCELLED
    with pytest.raises(JobStopped):  # a late delivery of a cancelled job does nothing
        run_step(settings, job_id, work)


def test_a_job_whose_worker_keeps_dying_fails(settings: FerretSettings, database_url: str) -> None:
    job_id = _new_job(settings)
    with session_scope(settings.database_url) as session:
        for _ in range(MAX_DELIVERIES_PER_STAGE):
            start_attempt(session, job_id, "ingest")  # deliveries whose worker died before finishing

    with pytest.raises(JobStopped, match="keeps dying"):
        run_step(settings, job_id, lambda session, progress: {})
    assert _job(settings, job_id).state == JobState.FAILED


def test_a_report_while_the_stage_holds_sqlites_write_lock_is_dropped_not_fatal(
    settings: FerretSettings, database_url: str
) -> None:
    """An ingest writes its documents in one transaction (committed at its end), so on the embedded SQLite its own
    progress reports, written on another connection, cannot get the write lock: they are dropped (the stage goes on)
    and the cancel check reads the row instead."""
    job_id = _new_job(settings)

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        create_job(session, "held")  # the stage's transaction now holds the write lock until the step commits
        session.flush()
        started = time.monotonic()
        progress("ingesting", 0.5)
        assert time.monotonic() - started < 5  # not the 30 s busy timeout
        assert _job(settings, job_id).progress == 0.0  # this report was dropped; reads never wait in WAL mode
        return {"added": 1}

    assert run_step(settings, job_id, work) == {"added": 1}
    assert _job(settings, job_id).state == JobState.SUCCEEDED


def test_a_bugs_error_is_its_first_line_cut_short_in_the_job_row() -> None:
    """A database error carries its SQL and parameters: a job's error read 1.5-3.9 KB of them (a QA pass)."""
    sql = "INSERT INTO synthetic_queries (run_id, document_id, sample, text) VALUES " + "(?, ?, ?, ?), " * 400
    error = IntegrityError(sql, [(1, 2, 0, "q")] * 50, Exception("UNIQUE constraint failed: synthetic_queries.run_id"))

    line = describe_error(error)

    assert "\n" not in line and len(line) <= ERROR_CHARS and line.startswith("IntegrityError: (builtins.Exception)")
    assert "UNIQUE constraint failed" in line
    assert describe_error(InvalidInputError("A sentence of its own.")) == "A sentence of its own."
    assert describe_error(KeyError()) == "KeyError"
