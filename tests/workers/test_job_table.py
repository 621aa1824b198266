"""The job table's queries (``ferret.core.db.job``) and the progress reporter, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.job import (
    create_job,
    fail_job,
    finish_job,
    get_job,
    list_jobs,
    mark_cancelled,
    request_cancel,
    start_attempt,
    update_progress,
)
from ferret.core.db.models import JobState
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.jobs.progress import JobCancelled, JobProgress


def test_create_get_and_list(job_database_url: str) -> None:
    with session_scope(job_database_url) as session:
        docs, wiki = create_corpus(session, "docs"), create_corpus(session, "wiki")
        first = create_job(session, "pipeline", corpus_id=docs.id, params={"task": "faq"})
        second = create_job(session, "ingest", corpus_id=wiki.id)
        third = create_job(session, "index_build", corpus_id=docs.id)
        session.commit()
        start_attempt(session, third.id, "index")
        session.commit()

        assert get_job(session, first.id).params == {"task": "faq"}
        assert get_job(session, first.id).state == JobState.QUEUED
        assert [job.id for job in list_jobs(session)] == [third.id, second.id, first.id]  # newest first
        assert [job.id for job in list_jobs(session, corpus="docs")] == [third.id, first.id]
        assert [job.id for job in list_jobs(session, corpus=wiki)] == [second.id]
        assert [job.id for job in list_jobs(session, state="running")] == [third.id]
        assert [job.id for job in list_jobs(session, state=JobState.QUEUED, limit=1)] == [second.id]
        with pytest.raises(NotFoundError, match="Job 999 does not exist"):
            get_job(session, 999)
        with pytest.raises(InvalidInputError, match="not one of"):
            list_jobs(session, state="sleeping")


def test_attempts_progress_and_finish(job_database_url: str) -> None:
    with session_scope(job_database_url) as session:
        job_id = create_job(session, "pipeline").id
        session.commit()
        job = start_attempt(session, job_id, "generate")
        assert (job.state, job.stage, job.attempts) == (JobState.RUNNING, "generate", 1)
        started = job.started_at
        assert started is not None
        job = start_attempt(session, job_id, "generate")  # a redelivery after a worker died
        assert job.attempts == 2 and job.started_at == started

        assert update_progress(session, job_id, stage="train", progress=1.7, counts={"kept": 3}) is False
        job = get_job(session, job_id)
        assert (job.stage, job.progress, job.counts) == ("train", 1.0, {"kept": 3})

        job = finish_job(session, job_id, {"model": "faq-job1"})
        assert job.state == JobState.SUCCEEDED and job.result == {"model": "faq-job1"} and job.finished_at
        # Finished jobs stay as they are: a late failure or progress report changes nothing.
        assert fail_job(session, job_id, "late").state == JobState.SUCCEEDED
        update_progress(session, job_id, stage="late")
        assert get_job(session, job_id).stage == "train"


def test_cancel_queued_at_once_running_at_next_check(job_database_url: str) -> None:
    with session_scope(job_database_url) as session:
        queued, running, done = (create_job(session, "pipeline").id for _ in range(3))
        session.commit()
        start_attempt(session, running, "train")
        finish_job(session, done)
        session.commit()

        job = request_cancel(session, queued)
        assert job.state == JobState.CANCELLED and job.finished_at is not None
        assert request_cancel(session, queued).state == JobState.CANCELLED  # again: no error

        job = request_cancel(session, running)
        assert job.state == JobState.RUNNING and job.cancel_requested
        assert update_progress(session, running, progress=0.5) is True  # the runner's next report sees it
        assert mark_cancelled(session, running).state == JobState.CANCELLED

        with pytest.raises(ConflictError, match="already succeeded"):
            request_cancel(session, done)


def test_progress_reporter_throttles_and_raises_on_cancel(job_database_url: str) -> None:
    with session_scope(job_database_url) as session:
        job_id = create_job(session, "pipeline").id
        session.commit()
        start_attempt(session, job_id, "train")

    now = [0.0]
    progress = JobProgress(
        job_database_url, job_id, stage="train", stage_index=2, stage_count=5, interval_s=0.5, clock=lambda: now[0]
    )
    progress.add_counts(model="m1")
    progress("training", 0.5)
    with session_scope(job_database_url) as session:
        job = get_job(session, job_id)
        assert job.progress == pytest.approx((2 + 0.5) / 5)
        assert job.counts["activity"] == "training" and job.counts["model"] == "m1"

    now[0] = 0.1
    progress("training", 0.75)  # within the interval: not written
    with session_scope(job_database_url) as session:
        assert get_job(session, job_id).counts["stage_progress"] == 0.5
        request_cancel(session, job_id)

    now[0] = 0.2
    progress("training", 0.8)  # still throttled: the cancel is seen at the next write
    now[0] = 0.8
    with pytest.raises(JobCancelled, match=f"Job {job_id} was cancelled"):
        progress("training", 0.9)
