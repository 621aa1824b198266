"""Queries on jobs: long work and its progress, readable by the CLI, the API and the admin."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, Job, JobState, utcnow
from ferret.core.errors import NotFoundError


def create_job(session: Session, kind: str, corpus: Corpus | None = None, params: dict[str, Any] | None = None) -> Job:
    job = Job(kind=kind, corpus_id=corpus.id if corpus else None, params=params or {}, state=JobState.QUEUED)
    session.add(job)
    session.flush()
    return job


def get_job(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFoundError(f"Job {job_id} does not exist.")
    return job


def list_jobs(session: Session, limit: int = 50) -> list[Job]:
    return list(session.scalars(select(Job).order_by(Job.id.desc()).limit(limit)))


def start_job(job: Job, stage: str = "") -> None:
    job.state = JobState.RUNNING
    job.stage = stage
    job.started_at = job.started_at or utcnow()


def update_progress(job: Job, stage: str, progress: float, **counts: Any) -> None:
    job.stage = stage
    job.progress = max(0.0, min(1.0, progress))
    job.counts = {**job.counts, **counts}


def finish_job(job: Job, *, error: str | None = None) -> None:
    job.state = JobState.FAILED if error else JobState.SUCCEEDED
    job.error = error
    if not error:
        job.progress = 1.0
    job.finished_at = utcnow()
