"""REALM pre-training as a job: a row in ``jobs`` (kind ``realm_pretrain``) with progress, cancel and resume.

The job runs in this process (the CLI in the foreground, or a background thread in embedded mode, as other
embedded jobs do). Its run folder and internal index versions are keyed by ``run_key`` (stored in the job's
params): ``resume_from`` starts a new job on the key of a killed one, so the trainer continues from its last
checkpoint instead of starting over.

Example:
    >>> job = create_realm_job(session, corpus, RealmConfig(steps=200), model_name="realm-1")
    >>> run_realm_job(settings, job.id)
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_corpus
from ferret.core.db.job import create_job, embedded_owner, get_job, list_jobs, set_celery_id
from ferret.core.db.models import Corpus, Job, JobState
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.jobs.progress import JobProgress
from ferret.core.jobs.runner import run_simple_job
from ferret.core.realm.config import RealmConfig
from ferret.core.settings import FerretSettings

JOB_REALM = "realm_pretrain"


def create_realm_job(
    session: Session,
    corpus: Corpus,
    config: RealmConfig,
    *,
    model_name: str | None = None,
    task: str | None = None,
    resume_from: int | None = None,
) -> Job:
    """A queued job, committed; ``resume_from`` takes the run key and model name of an earlier REALM job."""
    config = config.validated()
    run_key = uuid.uuid4().hex[:12]
    if resume_from is not None:
        earlier = get_job(session, resume_from)
        if earlier.kind != JOB_REALM:
            raise InvalidInputError(f"Job {resume_from} is not a REALM pre-training job.")
        if earlier.state == JobState.SUCCEEDED:
            raise ConflictError(f"Job {resume_from} already finished; there is nothing to resume.")
        run_key = str(earlier.params["run_key"])
        model_name = model_name or str(earlier.params["model_name"])
        config = RealmConfig.from_json(dict(earlier.params["config"]))
    params = {
        "run_key": run_key,
        "model_name": model_name or f"realm-{corpus.name}-{run_key[:6]}",
        "config": config.to_json(),
        "task": task,
        "resumed_from": resume_from,
    }
    job = create_job(session, JOB_REALM, corpus_id=corpus.id, params=params)
    session.commit()
    return job


def run_realm_job(settings: FerretSettings, job_id: int) -> dict[str, Any]:
    """Run (or resume) the job's pre-training and record its result in the job row."""
    from ferret.core.index.factory import open_backend
    from ferret.core.realm.pretrain import pretrain_corpus

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        job = get_job(session, job_id)
        params = dict(job.params)
        corpus = session.get(Corpus, job.corpus_id) if job.corpus_id is not None else None
        if corpus is None:
            raise InvalidInputError(f"The corpus of job {job_id} no longer exists.")
        corpus = get_corpus(session, corpus.name)
        backend = open_backend(settings)

        def report(activity: str, fraction: float, counts: dict[str, Any]) -> None:
            progress.add_counts(**counts)
            progress(activity, fraction)  # raises JobCancelled at a cancel: the trainer stops at this step

        try:
            return pretrain_corpus(
                session,
                settings,
                backend,
                corpus,
                RealmConfig.from_json(dict(params["config"])),
                model_name=str(params["model_name"]),
                run_key=str(params["run_key"]),
                task=params.get("task"),
                progress=report,
            )
        finally:
            backend.close()

    return run_simple_job(settings, job_id, "realm", work)


def start_realm_job_in_thread(session: Session, settings: FerretSettings, job: Job) -> threading.Thread:
    """Embedded mode: the job in a daemon thread of this process, owned by it (``fail_orphaned_jobs``)."""
    set_celery_id(session, job.id, embedded_owner())
    session.commit()

    def work() -> None:
        try:
            run_realm_job(settings, job.id)
        except Exception:  # already recorded in the job row
            return

    thread = threading.Thread(target=work, name=f"ferret-realm-{job.id}", daemon=True)
    thread.start()
    return thread


def realm_jobs(session: Session, *, limit: int = 20) -> list[Job]:
    return [job for job in list_jobs(session, limit=200) if job.kind == JOB_REALM][:limit]
