"""Queries on jobs: long work (pipelines, ingests, index builds) and the progress the CLI and admin show.

A job is written by two parties at once: the process that runs it (progress, stage, result) and whoever watches
or cancels it. So the writes that race are single ``UPDATE`` statements on the row, never read-modify-write of a
loaded object, and a cancel is a flag the runner polls (a queued job is cancelled at once: nothing runs yet).

Example:
    >>> job = create_job(session, "pipeline", corpus_id=corpus.id, params={"task": "faq"})
    >>> start_attempt(session, job.id, "generate")
    >>> request_cancel(session, job.id).cancel_requested
    True
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import case, select, update
from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, Job, JobState, utcnow
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError

FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
"""A job in one of these states never runs again."""

_STAGE_LENGTH = 64  # Job.stage is String(64)

EMBEDDED_PREFIX = "embedded:"
"""``celery_id`` of a job run in-process (embedded mode): ``embedded:<host>:<pid>`` of the process running it."""

ORPHANED_ERROR = (
    "The process that ran this job in embedded mode exited before it finished; `ferret jobs retry` runs it again "
    "without redoing the work it finished."
)


def create_job(
    session: Session,
    kind: str,
    *,
    corpus_id: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> Job:
    """A queued job; flushed so that it has its id, committed by the caller before any worker may see it."""
    job = Job(kind=kind, corpus_id=corpus_id, state=JobState.QUEUED, params=dict(params or {}), counts={})
    session.add(job)
    session.flush()
    return job


def get_job(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise NotFoundError(
            f"Job {job_id} does not exist; `ferret jobs list` shows the recent ones.",
            over_http=f"Job {job_id} does not exist; GET /v1/jobs lists the recent ones.",
        )
    return job


def list_jobs(
    session: Session,
    *,
    corpus: Corpus | str | None = None,
    state: JobState | str | None = None,
    limit: int = 50,
    kind: str | None = None,
) -> list[Job]:
    """The newest jobs first, optionally of one corpus (a row or its name), in one state, of one kind."""
    if limit < 1:
        raise InvalidInputError("The job list limit must be at least 1.")
    statement = select(Job).order_by(Job.id.desc()).limit(limit)
    if isinstance(corpus, Corpus):
        statement = statement.where(Job.corpus_id == corpus.id)
    elif corpus is not None:
        statement = statement.join(Corpus, Corpus.id == Job.corpus_id).where(Corpus.name == corpus)
    if state is not None:
        try:
            statement = statement.where(Job.state == JobState(state))
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise InvalidInputError(f"Job state {state!r} is not one of {known}.") from None
    if kind is not None:
        statement = statement.where(Job.kind == kind)
    return list(session.scalars(statement))


def active_jobs(session: Session, kind: str, *, corpus_id: int | None = None, **params: str) -> list[Job]:
    """The queued and running jobs of ``kind`` (of ``corpus_id``, when given) whose parameters hold ``params``
    (``task="faq"``), oldest first: what a job that must run alone checks before it starts."""
    query = select(Job).where(Job.kind == kind, Job.state.in_((JobState.QUEUED, JobState.RUNNING)))
    if corpus_id is not None:
        query = query.where(Job.corpus_id == corpus_id)
    for key, value in params.items():
        query = query.where(Job.params[key].as_string() == value)  # JSON path: SQLite json_extract, PostgreSQL ->>
    return list(session.scalars(query.order_by(Job.id)))


def set_celery_id(session: Session, job_id: int, celery_id: str) -> None:
    session.execute(update(Job).where(Job.id == job_id).values(celery_id=celery_id, updated_at=utcnow()))


def start_attempt(session: Session, job_id: int, stage: str) -> Job:
    """Count one delivery of a stage and mark the job running (a redelivery after a dead worker counts again)."""
    now = utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state.in_([JobState.QUEUED, JobState.RUNNING]))
        .values(
            state=JobState.RUNNING,
            stage=stage[:_STAGE_LENGTH],
            attempts=Job.attempts + 1,
            updated_at=now,
        )
    )
    session.execute(update(Job).where(Job.id == job_id, Job.started_at.is_(None)).values(started_at=now))
    return get_job(session, job_id)


def update_progress(
    session: Session,
    job_id: int,
    *,
    stage: str | None = None,
    progress: float | None = None,
    counts: Mapping[str, Any] | None = None,
) -> bool:
    """Write what a running job is doing; returns whether a cancel was requested meanwhile.

    ``counts`` replaces the stored counts (the reporter keeps the whole picture). Only a running job is touched:
    a late report from a stage whose job was cancelled or finished changes nothing.
    """
    values: dict[str, Any] = {"updated_at": utcnow()}
    if stage is not None:
        values["stage"] = stage[:_STAGE_LENGTH]
    if progress is not None:
        values["progress"] = min(1.0, max(0.0, float(progress)))
    if counts is not None:
        values["counts"] = dict(counts)
    session.execute(update(Job).where(Job.id == job_id, Job.state == JobState.RUNNING).values(**values))
    return cancel_requested(session, job_id)


def cancel_requested(session: Session, job_id: int) -> bool:
    """Whether the job should stop: a cancel was asked for, or it was already cancelled."""
    row = session.execute(select(Job.cancel_requested, Job.state).where(Job.id == job_id)).one_or_none()
    if row is None:
        return True  # the job was deleted: nobody is waiting for the work any more
    requested, state = row
    return bool(requested) or state == JobState.CANCELLED


def record_error(session: Session, job_id: int, error: str) -> None:
    """The last error of a job that goes on (a transient failure that will be retried)."""
    session.execute(update(Job).where(Job.id == job_id).values(error=error, updated_at=utcnow()))


def save_result(session: Session, job_id: int, result: Mapping[str, Any]) -> None:
    """What the job produced so far (the next stage of a pipeline reads it back after a redelivery)."""
    session.execute(update(Job).where(Job.id == job_id).values(result=dict(result), updated_at=utcnow()))


def finish_job(session: Session, job_id: int, result: Mapping[str, Any] | None = None) -> Job:
    """Mark a running job succeeded (a job cancelled meanwhile stays cancelled)."""
    values: dict[str, Any] = {
        "state": JobState.SUCCEEDED,
        "progress": 1.0,
        "finished_at": utcnow(),
        "updated_at": utcnow(),
        "error": None,
    }
    if result is not None:
        values["result"] = dict(result)
    session.execute(update(Job).where(Job.id == job_id, Job.state.not_in(FINISHED_STATES)).values(**values))
    return get_job(session, job_id)


def fail_job(session: Session, job_id: int, error: str) -> Job:
    """Mark an unfinished job failed with the error that stopped it."""
    now = utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state.not_in(FINISHED_STATES))
        .values(state=JobState.FAILED, error=error, finished_at=now, updated_at=now)
    )
    return get_job(session, job_id)


def mark_cancelled(session: Session, job_id: int) -> Job:
    """The runner stopped at a cancel: the job ends as cancelled."""
    now = utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state.not_in(FINISHED_STATES))
        .values(state=JobState.CANCELLED, cancel_requested=True, finished_at=now, updated_at=now)
    )
    return get_job(session, job_id)


def request_cancel(session: Session, job_id: int, *, force: bool = False) -> Job:
    """Cancel a job: a queued one at once, a running one at its next progress check (with ``force``: at once, for a
    job whose worker died; a stage still running stops at its next check); a cancelled one stays so.

    Raises ``ConflictError`` for a job that already succeeded or failed: there is nothing left to stop.
    """
    job = get_job(session, job_id)
    if job.state == JobState.CANCELLED:
        return job
    if job.state in FINISHED_STATES:
        raise ConflictError(f"Job {job_id} already {job.state.value}; there is nothing to cancel.")
    now = utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == JobState.QUEUED)
        .values(state=JobState.CANCELLED, cancel_requested=True, finished_at=now, updated_at=now)
    )
    session.execute(
        update(Job).where(Job.id == job_id, Job.state == JobState.RUNNING).values(cancel_requested=True, updated_at=now)
    )
    if force:
        return mark_cancelled(session, job_id)
    return get_job(session, job_id)


def reopen_job(session: Session, job_id: int) -> Job:
    """Queue a failed or cancelled job again (a retry): its error, cancel flag, progress and deliveries are reset,
    its payload and result kept (a redelivered stage finds its earlier work through them).

    One conditional ``UPDATE``: of two retries of the same job at the same moment only one reopens it."""
    job = get_job(session, job_id)
    if job.state not in (JobState.FAILED, JobState.CANCELLED):
        raise ConflictError(f"Job {job_id} is {job.state.value}; only a failed or cancelled job can be retried.")
    if job.payload is None:
        raise ConflictError(f"Job {job_id} kept no input to run again; start it again with the command that made it.")
    reopened = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == job.state)
        .values(
            state=JobState.QUEUED,
            error=None,
            cancel_requested=False,
            finished_at=None,
            progress=0.0,
            stage="",
            attempts=0,
            # A Celery id stays until the retry is sent (it numbers the retry's task ids); a runner's goes.
            celery_id=case((Job.celery_id.startswith(EMBEDDED_PREFIX), None), else_=Job.celery_id),
            updated_at=utcnow(),
        )
    )
    if getattr(reopened, "rowcount", 1) == 0:
        raise ConflictError(f"Job {job_id} was retried by another caller at the same moment; follow that run.")
    return get_job(session, job_id)


def embedded_owner(pid: int | None = None) -> str:
    """The ``celery_id`` of a job run in embedded mode by process ``pid`` of this host (this process by default):
    ``embedded:<host>:<pid>:<start>``, see ``process_identity``."""
    return f"{EMBEDDED_PREFIX}{socket.gethostname()}:{process_identity(pid)}"


def process_identity(pid: int | None = None) -> str:
    """``<pid>:<start>`` of process ``pid`` (this one by default); ``<pid>`` alone where the start is unknown.

    A PID alone does not name a process: once the runner is gone the kernel may give its number to another one, and
    the orphan check would trust that stranger for ever. The start time (in clock ticks since boot, from
    ``/proc/<pid>/stat``) tells the two apart."""
    pid = os.getpid() if pid is None else pid
    start = _start_time(pid)
    return f"{pid}" if start is None else f"{pid}:{start}"


def embedded_runner_gone(job: Job) -> bool:
    """Whether an unfinished job's embedded runner (a thread or a detached process of this host) no longer exists.

    False for jobs of workers or of another host: their processes cannot be checked from here."""
    prefix = f"{EMBEDDED_PREFIX}{socket.gethostname()}:"
    owner = job.celery_id or ""
    if job.state in FINISHED_STATES or not owner.startswith(prefix):
        return False
    return not process_alive(owner.removeprefix(prefix))


def fail_orphaned_jobs(session: Session) -> list[int]:
    """Mark failed the unfinished embedded-mode jobs of this host whose process is gone; returns their ids.

    An embedded job runs in a daemon thread, so it dies with its process (a restart, Ctrl-C) and would otherwise
    stay "running" for ever. Jobs of other hosts are left alone: their processes cannot be checked from here.
    """
    prefix = f"{EMBEDDED_PREFIX}{socket.gethostname()}:"
    rows = session.execute(
        select(Job.id, Job.celery_id).where(Job.state.not_in(FINISHED_STATES), Job.celery_id.startswith(prefix))
    ).all()
    orphaned = [job_id for job_id, owner in rows if not process_alive(str(owner).removeprefix(prefix))]
    for job_id in orphaned:
        fail_job(session, job_id, ORPHANED_ERROR)
    return orphaned


def process_alive(identity: str) -> bool:
    """Whether the process named ``identity`` (``<pid>:<start>`` from ``process_identity``, or a bare ``<pid>``
    written before start times were kept) still runs on this host. A live process with that PID but another start
    time is a stranger that reused the number: the named one is dead."""
    pid, _, start = identity.partition(":")
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        pass
    fields = _stat_fields(int(pid))
    if fields is None:  # no /proc (not Linux): the PID is all there is to go on
        return True
    if fields[0] in ("Z", "X"):
        # An exited process not reaped yet (a detached runner whose parent is gone) still answers kill(pid, 0).
        return False
    return not start or fields[19] == start


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first, start time at index 19), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields is not None else None
