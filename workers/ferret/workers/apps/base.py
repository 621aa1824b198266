"""The Celery configuration every worker kind shares, built from ``FerretSettings``.

Why these settings: a task is acknowledged only after it ran (``acks_late``) and a task whose worker process
died is put back (``task_reject_on_worker_lost``), so a killed worker never loses work; the tasks are idempotent,
so running one twice is harmless. Each process reserves one task at a time (``prefetch 1``): a long training run
never holds a second task hostage. With Redis, an unacknowledged task goes back to the queue after the
``visibility_timeout``; it must exceed the longest task, or a task still running would be delivered again.

Example:
    >>> app = create_app(WorkerKind.GPU)  # what ferret.workers.apps.gpu holds as ``app``
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from ferret.core.db.engine import get_engine
from ferret.core.errors import FerretError
from ferret.core.settings import FerretSettings, get_settings
from ferret.workers.names import DEFAULT_CONCURRENCY, QUEUE_OF_KIND, QUEUE_OF_TASK, SYNC_DUE_BEAT, Queue, WorkerKind
from ferret.workers.tasks.sources import register_sync_due
from ferret.workers.tasks.table import register_tasks

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a worker never downloads a model at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizer threads and forked pool processes do not mix


def _broker_url(settings: FerretSettings) -> str:
    if not settings.broker_url:
        raise FerretError(
            "FERRET_BROKER_URL is not set; workers need a Redis broker (e.g. redis://localhost:6379/0), "
            "while the embedded mode runs jobs in-process without workers."
        )
    return settings.broker_url


def visibility_timeout_s(settings: FerretSettings) -> int:
    return settings.broker_visibility_timeout_s or settings.task_time_limit_s + 600


def celery_config(settings: FerretSettings, kind: WorkerKind | None) -> dict[str, Any]:
    """The app configuration of a worker kind (``None``: the client app that only sends tasks)."""
    broker = _broker_url(settings)
    visibility = visibility_timeout_s(settings)
    hard_limit = settings.task_time_limit_s
    config: dict[str, Any] = {
        "broker_url": broker,
        "result_backend": settings.result_backend_url or broker,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": hard_limit,
        "task_soft_time_limit": hard_limit - min(60, hard_limit // 10),  # the task gets to record why it stopped
        "task_track_started": True,
        "task_routes": {str(name): {"queue": str(queue)} for name, queue in QUEUE_OF_TASK.items()},
        "task_default_queue": str(Queue.CPU),
        "result_expires": 7 * 24 * 3600,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": visibility,
            # kombu sweeps for unacknowledged tasks every interval x throttle seconds; without this a short
            # visibility timeout would still wait 100 s for the first sweep.
            "unacked_restore_interval": max(1, min(60, visibility // 10)),
            "unacked_restore_throttle": 1,
        },
        "result_backend_transport_options": {"visibility_timeout": visibility},
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }
    if kind is not None:
        config["task_default_queue"] = str(QUEUE_OF_KIND[kind])
        config["worker_concurrency"] = DEFAULT_CONCURRENCY[kind]
    if kind == WorkerKind.CPU:
        # Celery beat (``celery -A ferret.workers.apps.cpu beat``) looks at the source schedules every minute.
        config["beat_schedule"] = {"sync-due-sources": SYNC_DUE_BEAT}
    return config


def create_app(kind: WorkerKind | None, settings: FerretSettings | None = None) -> Celery:
    """A Celery app for a worker kind, configured from the settings (read from the environment by default)."""
    settings = settings or get_settings()
    name = f"ferret-{kind.value}" if kind is not None else "ferret-client"
    config = celery_config(settings, kind)
    app = Celery(name)
    app.conf.update(config)
    if kind is not None:
        register_tasks(app, kind)  # the tasks of this kind's queue, from the declared pipelines
    if kind == WorkerKind.CPU:
        register_sync_due(app)  # scheduled source syncs (beat's entry above)
    return app


@lru_cache(maxsize=4)
def _client_app(broker_url: str, backend_url: str | None, time_limit: int, visibility: int | None) -> Celery:
    settings = FerretSettings(
        broker_url=broker_url,
        result_backend_url=backend_url,
        task_time_limit_s=time_limit,
        broker_visibility_timeout_s=visibility,
    )
    return create_app(None, settings)


def client_app(settings: FerretSettings) -> Celery:
    """The app that sends tasks and revokes them (the API, the CLI); one per broker, kept for the process."""
    return _client_app(
        _broker_url(settings),
        settings.result_backend_url,
        settings.task_time_limit_s,
        settings.broker_visibility_timeout_s,
    )


@worker_process_init.connect
def _fresh_database_engines(**_: Any) -> None:
    """A forked pool process must not share the parent's database connections: open its own."""
    get_engine.cache_clear()
