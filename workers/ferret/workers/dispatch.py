"""Starting and cancelling jobs: what the HTTP API and the CLI call.

With a broker (``FERRET_BROKER_URL``) a job is a Celery chain across the worker queues, every message with
``expires=``; in embedded mode (no broker) the same step functions run in a background thread of this process,
so the caller is not blocked either way. The job row is committed before any work is sent, so a worker always
finds it.

Example:
    >>> job = start_pipeline_job(session, settings, get_task(session, "faq"), PipelineConfig(promote="force"))
    >>> cancel_job(session, settings, job.id).cancel_requested
    True
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from ferret.connectors.registry import build_connector, get_connector_class
from ferret.core.db.job import create_job, embedded_owner, fail_job, request_cancel, set_celery_id
from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import Corpus, Job, RetrievalTask, Source
from ferret.core.errors import ConflictError, FerretError
from ferret.core.jobs.catalog import JOB_KINDS
from ferret.core.jobs.corpus_jobs import INDEX_BUILD, INGEST
from ferret.core.jobs.queue import JobQueue
from ferret.core.jobs.runner import run_job
from ferret.core.jobs.source_sync import SOURCE_SYNC
from ferret.core.jobs.source_sync import start_payload as source_sync_payload
from ferret.core.pipeline.declaration import Pipeline
from ferret.core.pipeline.promptagator.stages import PROMPTAGATOR
from ferret.core.pipeline.promptagator.state import PipelineConfig, PipelineState
from ferret.core.pipeline.realm.stages import REALM
from ferret.core.pipeline.realm.state import RealmState, resumed_state
from ferret.core.realm.config import RealmConfig
from ferret.core.settings import FerretSettings
from ferret.workers.names import EXPIRES_S, QUEUE_OF_KIND, task_id

logger = logging.getLogger(__name__)

_threads: dict[int, threading.Thread] = {}
"""Embedded-mode jobs running in this process, by job id."""


def start_pipeline_job(session: Session, settings: FerretSettings, task: RetrievalTask, config: PipelineConfig) -> Job:
    """Queue the Promptagator pipeline of ``task``: generate (llm) → filter (cpu) → train → guard → index (gpu).

    The new model version is named ``config.model_name`` or ``<task>-job<id>``. Commits the session.
    """
    config = config.validated()
    if config.model_name is not None and find_model_version(session, config.model_name) is not None:
        raise ConflictError(f"Model version {config.model_name!r} already exists; choose another model name.")
    job = create_job(session, PROMPTAGATOR.kind, corpus_id=task.corpus_id, params={"task": task.name})
    state = PipelineState.start(task, config, model_name=config.model_name or f"{task.name}-job{job.id}", job_id=job.id)
    job.params = {"task": task.name, "model_name": state.model_name, "config": config.to_json()}
    return _start(session, settings, job, PROMPTAGATOR, state.to_json())


def start_index_build_job(
    session: Session, settings: FerretSettings, corpus: Corpus, model: str, *, promote: bool = False
) -> Job:
    """Queue an index build of ``corpus`` with model version ``model`` (gpu queue); commits the session."""
    job = create_job(session, INDEX_BUILD.kind, corpus_id=corpus.id, params={"model": model, "promote": promote})
    payload = {"job_id": job.id, "corpus": corpus.name, "model": model, "promote": promote}
    return _start(session, settings, job, INDEX_BUILD, payload)


def start_ingest_job(
    session: Session,
    settings: FerretSettings,
    corpus: Corpus,
    kind: str,
    config: dict[str, Any],
    *,
    incremental: bool = False,
) -> Job:
    """Queue an ingest of one source (connector ``kind`` with its JSON ``config``) into ``corpus`` (cpu queue)."""
    get_connector_class(kind)  # an unknown kind is the caller's mistake: say so now, not in a worker's log
    params = {"kind": kind, "config": dict(config), "incremental": incremental}
    job = create_job(session, INGEST.kind, corpus_id=corpus.id, params=params)
    payload = {"job_id": job.id, "corpus": corpus.name, **params}
    return _start(session, settings, job, INGEST, payload)


def start_realm_job(
    session: Session,
    settings: FerretSettings,
    corpus: Corpus,
    config: RealmConfig,
    *,
    model_name: str | None = None,
    task: str | None = None,
    resume_from: int | None = None,
) -> Job:
    """Queue REALM pre-training of ``corpus`` (gpu queue: pretrain, guard); commits the session."""
    if resume_from is not None:
        state = resumed_state(session, resume_from, corpus)
    else:
        state = RealmState.start(corpus, config, model_name=model_name, task=task)
        if find_model_version(session, state.model_name) is not None:
            raise ConflictError(f"Model version {state.model_name!r} already exists; choose another model name.")
    job = create_job(session, REALM.kind, corpus_id=corpus.id)
    state = replace(state, job_id=job.id)
    job.params = {"model_name": state.model_name, "resumed_from": resume_from, "state": state.to_json()}
    return _start(session, settings, job, REALM, state.to_json())


def start_source_sync_job(
    session: Session, settings: FerretSettings, source: Source, *, trigger: str = "manual"
) -> Job:
    """Queue a sync of a configured source (cpu queue); commits the session."""
    job, payload = source_sync_payload(session, source, get_connector_class(source.kind), trigger=trigger)
    return _start(session, settings, job, SOURCE_SYNC, payload)


def cancel_job(session: Session, settings: FerretSettings, job_id: int) -> Job:
    """Cancel a job: a queued one at once, a running one at its next progress report; commits the session.

    Its Celery messages are revoked too, so a worker that has not started a step drops it; the flag in the job
    row is what stops a step that is running (its progress reports check it).
    """
    job = request_cancel(session, job_id)
    session.commit()
    if settings.broker_url and job.celery_id:
        pipeline = JOB_KINDS.get(job.kind)
        ids = [task_id(job.id, stage) for stage in pipeline.stage_names] if pipeline is not None else [job.celery_id]
        try:
            _client_app(settings).control.revoke(ids)
        except Exception:  # the flag in the row is what counts; a broker hiccup must not fail the cancel
            logger.warning("could not revoke the Celery tasks of job %s", job_id, exc_info=True)
    return job


def _start(
    session: Session, settings: FerretSettings, job: Job, pipeline: Pipeline[Any], payload: dict[str, Any]
) -> Job:
    """Send the job's stages as one Celery chain (each stage on its queue), or run them in a thread without a broker."""
    session.commit()
    if not settings.broker_url:
        return _run_in_thread(session, job, lambda: run_job(settings, pipeline, payload, connectors=build_connector))
    app = _client_app(settings)
    signatures = [
        app.signature(
            stage.task,
            args=(payload,) if position == 0 else (),
            queue=str(QUEUE_OF_KIND[stage.queue]),
            task_id=task_id(job.id, stage.name),
            expires=EXPIRES_S,
        )
        for position, stage in enumerate(pipeline.stages)
    ]
    send = signatures[0].apply_async if len(signatures) == 1 else _chain(signatures).apply_async
    return _send(session, settings, job, send, task_id(job.id, pipeline.stages[0].name))


def _client_app(settings: FerretSettings) -> Any:
    # Imported here, not at the top: Celery is the optional ``workers`` extra, needed only with a broker.
    from ferret.workers.apps.base import client_app

    return client_app(settings)


def _chain(signatures: list[Any]) -> Any:
    from celery import chain  # the optional ``workers`` extra, as above

    return chain(*signatures)


def _send(session: Session, settings: FerretSettings, job: Job, send: Callable[[], Any], celery_id: str) -> Job:
    try:
        send()
    except Exception as error:
        fail_job(session, job.id, f"Could not send the job to the broker: {type(error).__name__}: {error}")
        session.commit()
        raise FerretError(
            f"Could not reach the Celery broker at {settings.broker_url}; check that Redis is running "
            "(or unset FERRET_BROKER_URL to run jobs in-process)."
        ) from error
    set_celery_id(session, job.id, celery_id)
    session.commit()
    session.refresh(job)
    return job


def _run_in_thread(session: Session, job: Job, work: Callable[[], None]) -> Job:
    """Embedded mode: the job runs in a daemon thread of this process.

    It stops with the process; the job row names this process, so that the next Ferret process on this host marks
    it failed (``fail_orphaned_jobs``) rather than leaving it "running".
    """
    set_celery_id(session, job.id, embedded_owner())
    session.commit()
    session.refresh(job)
    thread = threading.Thread(target=work, name=f"ferret-job-{job.id}", daemon=True)
    _threads[job.id] = thread
    thread.start()
    return job


def wait_for_embedded_job(job_id: int, timeout_s: float | None = None) -> bool:
    """Wait for an embedded-mode job of this process to end; False when it still runs after ``timeout_s``."""
    thread = _threads.get(job_id)
    if thread is None:
        return True
    thread.join(timeout_s)
    if thread.is_alive():
        return False
    _threads.pop(job_id, None)
    return True


class Dispatcher(JobQueue):
    """The job queue of one process (``ferret.core.jobs.queue.JobQueue``): Celery with a broker, threads without."""

    def __init__(self, settings: FerretSettings) -> None:
        self.settings = settings

    def start_pipeline_job(self, session: Session, task: RetrievalTask, config: PipelineConfig) -> Job:
        return start_pipeline_job(session, self.settings, task, config)

    def start_index_build_job(self, session: Session, corpus: Corpus, model: str, *, promote: bool = False) -> Job:
        return start_index_build_job(session, self.settings, corpus, model, promote=promote)

    def start_ingest_job(
        self, session: Session, corpus: Corpus, kind: str, config: dict[str, Any], *, incremental: bool = False
    ) -> Job:
        return start_ingest_job(session, self.settings, corpus, kind, config, incremental=incremental)

    def start_realm_job(
        self,
        session: Session,
        corpus: Corpus,
        config: RealmConfig,
        *,
        model_name: str | None = None,
        task: str | None = None,
        resume_from: int | None = None,
    ) -> Job:
        return start_realm_job(
            session, self.settings, corpus, config, model_name=model_name, task=task, resume_from=resume_from
        )

    def start_source_sync_job(self, session: Session, source: Source, *, trigger: str = "manual") -> Job:
        return start_source_sync_job(session, self.settings, source, trigger=trigger)

    def cancel_job(self, session: Session, job_id: int) -> Job:
        return cancel_job(session, self.settings, job_id)

    def wait(self, job_id: int, timeout_s: float | None = None) -> bool:
        return wait_for_embedded_job(job_id, timeout_s)
