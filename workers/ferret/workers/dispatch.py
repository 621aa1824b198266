"""Starting, retrying and cancelling jobs: the job-queue adapter the runtime hands to every face.

One generic ``start_job(kind, ...)``: the kind's declaration (``ferret.core.jobs.catalog.JOB_KINDS``) checks the
inputs and says what the job starts from (``Pipeline.prepare``); this module only decides where it runs
(``ferret.core.jobs.queue.Placement``):

- with a broker (``FERRET_BROKER_URL``) a job is a Celery chain across the worker queues, every message with
  ``expires=`` (unless the caller asked to run it here);
- in embedded mode the same step functions run in a background thread of this process, or, for ``DETACHED``, in a
  runner process of their own (``ferret.workers.detached``) that outlives the caller.

The job row, with its payload, is committed before any work is sent, so a worker or a runner always finds it.

Example:
    >>> job = start_job(session, settings, "pipeline", task=get_task(session, "faq"), config=PipelineConfig())
    >>> cancel_job(session, settings, job.id).cancel_requested
    True
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from ferret.connectors.registry import build_connector, get_connector_class
from ferret.core.db.job import create_job, embedded_owner, fail_job, reopen_job, request_cancel, set_celery_id
from ferret.core.db.models import Job
from ferret.core.errors import UnavailableError
from ferret.core.jobs.catalog import JOB_KINDS, pipeline_of
from ferret.core.jobs.queue import JobQueue, Placement
from ferret.core.jobs.runner import run_job
from ferret.core.pipeline.declaration import LaunchContext, Pipeline
from ferret.core.settings import FerretSettings, redacted_url
from ferret.workers.names import EXPIRES_S, QUEUE_OF_KIND, run_of_task_id, task_id

logger = logging.getLogger(__name__)

_done: dict[int, threading.Event] = {}
"""Embedded-mode jobs run by threads of this process, by job id: each event is set when its thread ends. An event,
not ``Thread.join``: a join that Ctrl-C interrupts leaves the thread looking stopped while it still runs (CPython
3.11), and the Ctrl-C path must wait for the thread to stop."""


def start_job(
    session: Session, settings: FerretSettings, kind: str, /, *, placement: Placement = Placement.QUEUE, **inputs: Any
) -> Job:
    """Start a job of ``kind`` with the inputs its declaration takes; commits the session and returns the row."""
    pipeline = pipeline_of(kind)
    launch = pipeline.launch(LaunchContext(session, settings, build_connector, get_connector_class), inputs)
    job = create_job(session, pipeline.kind, corpus_id=launch.corpus_id)
    params, payload = launch.begin(job.id)
    job.params, job.payload = params, payload
    return _start(session, settings, job, pipeline, payload, placement)


def retry_job(session: Session, settings: FerretSettings, job_id: int, *, placement: Placement) -> Job:
    """Run a failed or cancelled job again, as the same job, from its stored payload (``reopen_job``)."""
    job = reopen_job(session, job_id)
    assert job.payload is not None  # reopen_job refuses a job without one
    return _start(session, settings, job, pipeline_of(job.kind), dict(job.payload), placement)


def cancel_job(session: Session, settings: FerretSettings, job_id: int, *, force: bool = False) -> Job:
    """Cancel a job: a queued one at once, a running one at its next progress report (``force``: at once, for a
    job whose worker died); commits the session.

    Its Celery messages are revoked too, so a worker that has not started a step drops it; the flag in the job
    row is what stops a step that is running (its progress reports check it).
    """
    job = request_cancel(session, job_id, force=force)
    session.commit()
    if settings.broker_url and job.celery_id and not job.celery_id.startswith("embedded:"):
        pipeline = JOB_KINDS.get(job.kind)
        run = run_of_task_id(job.celery_id) or 0
        stages = pipeline.stage_names if pipeline is not None else []
        ids = [task_id(job.id, stage, run) for stage in stages] or [job.celery_id]
        try:
            _client_app(settings).control.revoke(ids)
        except Exception:  # the flag in the row is what counts; a broker hiccup must not fail the cancel
            logger.warning("could not revoke the Celery tasks of job %s", job_id, exc_info=True)
    return job


def _start(
    session: Session,
    settings: FerretSettings,
    job: Job,
    pipeline: Pipeline[Any],
    payload: dict[str, Any],
    placement: Placement,
) -> Job:
    """Send the job's stages as one Celery chain (each stage on its queue), or run them here or detached."""
    session.commit()
    if placement == Placement.HERE or (not settings.broker_url and placement == Placement.QUEUE):
        return _run_in_thread(session, job, lambda: run_job(settings, pipeline, payload, connectors=build_connector))
    if not settings.broker_url:
        return _run_detached(session, settings, job)
    app = _client_app(settings)
    # A retry runs under new task ids: the ids of the run it follows may be revoked in the workers (a cancel).
    previous = run_of_task_id(job.celery_id)
    run = 0 if previous is None else previous + 1
    signatures = [
        app.signature(
            stage.task,
            args=(payload,) if position == 0 else (),
            queue=str(QUEUE_OF_KIND[stage.queue]),
            task_id=task_id(job.id, stage.name, run),
            expires=EXPIRES_S,
        )
        for position, stage in enumerate(pipeline.stages)
    ]
    send = signatures[0].apply_async if len(signatures) == 1 else _chain(signatures).apply_async
    return _send(session, settings, job, send, task_id(job.id, pipeline.stages[0].name, run))


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
        url = settings.broker_url or ""  # set: only the broker path sends
        broker = redacted_url(url)
        reason = str(error).replace(url, broker) if url else str(error)
        fail_job(session, job.id, f"Could not send the job to the broker at {broker}: {type(error).__name__}: {reason}")
        session.commit()
        raise UnavailableError(
            f"Could not reach the Celery broker at {broker}; check that Redis is running (or unset "
            f"FERRET_BROKER_URL to run jobs in-process); job {job.id} is recorded as failed and can be retried."
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
    done = _done[job.id] = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    threading.Thread(target=run, name=f"ferret-job-{job.id}", daemon=True).start()
    return job


def _run_detached(session: Session, settings: FerretSettings, job: Job) -> Job:
    """Embedded mode without a caller that stays: a runner process in a session of its own (``setsid``), so it
    outlives the command that started it and a Ctrl-C or a closed terminal does not reach it.

    The row names the runner (``embedded:<host>:<pid>``): a runner that dies is found by the next command on this
    host (``fail_orphaned_jobs``) or by ``ferret jobs follow``, and the job is marked failed, ready for a retry.
    Its own output goes to ``FERRET_HOME/logs/job-<id>.log``.
    """
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # The runner reads its settings from the environment; where the state lives is this process's, whatever set it.
    environment = {**os.environ, "FERRET_HOME": str(settings.home), "FERRET_DATABASE_URL": settings.database_url}
    if settings.qdrant_url:
        environment["FERRET_QDRANT_URL"] = settings.qdrant_url
    with open(logs / f"job-{job.id}.log", "ab") as log:
        runner = subprocess.Popen(
            [sys.executable, "-m", "ferret.workers.detached", str(job.id)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=environment,
        )
    set_celery_id(session, job.id, embedded_owner(runner.pid))
    session.commit()
    session.refresh(job)
    return job


def wait_for_embedded_job(job_id: int, timeout_s: float | None = None) -> bool:
    """Wait for an embedded-mode job of this process to end; False when it still runs after ``timeout_s``."""
    done = _done.get(job_id)
    if done is None:
        return True
    if not done.wait(timeout_s):
        return False
    _done.pop(job_id, None)
    return True


class Dispatcher(JobQueue):
    """The job queue of one process (``ferret.core.jobs.queue.JobQueue``): Celery with a broker, threads or a
    detached runner without."""

    def __init__(self, settings: FerretSettings) -> None:
        self.settings = settings

    def start_job(
        self, kind: str, session: Session, /, *, placement: Placement = Placement.QUEUE, **inputs: Any
    ) -> Job:
        return start_job(session, self.settings, kind, placement=placement, **inputs)

    def retry_job(self, session: Session, job_id: int, *, placement: Placement = Placement.QUEUE) -> Job:
        return retry_job(session, self.settings, job_id, placement=placement)

    def cancel_job(self, session: Session, job_id: int, *, force: bool = False) -> Job:
        return cancel_job(session, self.settings, job_id, force=force)

    def wait(self, job_id: int, timeout_s: float | None = None) -> bool:
        return wait_for_embedded_job(job_id, timeout_s)
