"""Scheduled source syncs on the CPU queue: Celery beat sends ``ferret.sources.sync_due`` every minute
(``ferret.workers.names.SYNC_DUE_BEAT`` in the CPU app's ``beat_schedule``) and a CPU worker syncs the sources
that are due.

Run beat next to the workers with ``celery -A ferret.workers.apps.cpu beat``. Without a broker,
``ferret source scheduler`` does the same in-process.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from ferret.connectors.registry import build_connector
from ferret.core.db.engine import session_scope
from ferret.core.index.factory import open_backend
from ferret.core.settings import get_settings
from ferret.core.sources.schedule import sync_due
from ferret.workers.names import SYNC_DUE_TASK


def register_sync_due(app: Celery) -> Any:
    """Define the scheduled-sync task on a worker app (the CPU worker's)."""
    return app.task(name=SYNC_DUE_TASK, ignore_result=True, shared=False)(sync_due_sources)


def sync_due_sources() -> dict[str, Any]:
    """Sync every due source once; returns ``{source: state or error}``."""
    settings = get_settings()
    backend = open_backend(settings)
    try:
        with session_scope(settings.database_url) as session:
            results = sync_due(session, settings, backend, build_connector)
    finally:
        backend.close()
    return {name: result if isinstance(result, str) else result.state.value for name, result in results}
