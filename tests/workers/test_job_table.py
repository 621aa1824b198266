"""The job table's queries (``ferret.core.db.job``) and the progress reporter, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.job import (
    ORPHANED_ERROR,
    create_job,
    embedded_owner,
    embedded_runner_gone,
    fail_job,
    fail_orphaned_jobs,
    finish_job,
    get_job,
    list_jobs,
    mark_cancelled,
    process_alive,
    process_identity,
    reopen_job,
    request_cancel,
    set_celery_id,
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


def test_a_forced_cancel_ends_a_running_job_whose_worker_died_and_a_retry_reopens_it(job_database_url: str) -> None:
    with session_scope(job_database_url) as session:
        job_id = create_job(session, "pipeline").id
        job = get_job(session, job_id)
        job.payload = {"job_id": job_id}
        session.commit()
        start_attempt(session, job_id, "train")
        session.commit()

        job = request_cancel(session, job_id, force=True)

        assert job.state == JobState.CANCELLED and job.finished_at is not None and job.cancel_requested
        assert update_progress(session, job_id, progress=0.5) is True  # a stage still running stops at its check
        assert reopen_job(session, job_id).state == JobState.QUEUED


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


def test_a_runner_whose_pid_was_reused_by_another_process_is_dead(job_database_url: str) -> None:
    """Issue 11, item 10: the orphan check trusted a PID, so a dead runner whose number the kernel gave to another
    process kept its job "running" for ever. The row names the runner's start time too; a mismatch is a death."""
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.05)  # start times count clock ticks (10 ms): the stranger starts in a later one
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        runner_identity = process_identity(runner.pid)
        pid, start = runner_identity.split(":")
        assert process_alive(runner_identity)
        assert process_identity(stranger.pid).split(":")[1] != start and pid != str(stranger.pid)
        # The runner's row, as it would read once its PID was handed to the stranger (same number, other start).
        reused = f"{stranger.pid}:{start}"
        with session_scope(job_database_url) as session:
            job = create_job(session, "ingest")
            set_celery_id(session, job.id, f"embedded:{socket.gethostname()}:{reused}")
            start_attempt(session, job.id, "ingest")
            alive = create_job(session, "ingest")
            set_celery_id(session, alive.id, embedded_owner(stranger.pid))
            start_attempt(session, alive.id, "ingest")
            session.commit()

            assert not process_alive(reused) and process_alive(process_identity(stranger.pid))
            assert embedded_runner_gone(get_job(session, job.id))
            assert fail_orphaned_jobs(session) == [job.id]
            session.commit()
            assert get_job(session, alive.id).state == JobState.RUNNING
    finally:
        for process in (runner, stranger):
            process.kill()
            process.wait()
    assert not process_alive(runner_identity)


def test_embedded_jobs_of_an_exited_process_are_marked_failed(job_database_url: str) -> None:
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_owner = f"embedded:{socket.gethostname()}:{exited.stdout.strip()}"
    with session_scope(job_database_url) as session:
        ids = {name: create_job(session, "pipeline").id for name in ("dead", "alive", "other-host", "done", "celery")}
        session.commit()
        for name, owner in {
            "dead": dead_owner,
            "alive": embedded_owner(),  # this process: still running its thread
            "other-host": f"embedded:elsewhere.example:{os.getpid() + 999_999}",  # cannot be checked from here
            "done": dead_owner,
            "celery": "job-5-generate",
        }.items():
            set_celery_id(session, ids[name], owner)
            start_attempt(session, ids[name], "generate")
        finish_job(session, ids["done"])
        session.commit()

        assert fail_orphaned_jobs(session) == [ids["dead"]]
        session.commit()
        dead = get_job(session, ids["dead"])
        assert dead.state == JobState.FAILED and dead.error == ORPHANED_ERROR and dead.finished_at
        assert {name: get_job(session, job_id).state for name, job_id in ids.items() if name != "dead"} == {
            "alive": JobState.RUNNING,
            "other-host": JobState.RUNNING,
            "done": JobState.SUCCEEDED,
            "celery": JobState.RUNNING,
        }
        assert fail_orphaned_jobs(session) == []  # already failed: nothing more to do
