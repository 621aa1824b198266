"""Periodic syncs: which sources are due, and the embedded scheduler that syncs them without a broker.

With a broker, Celery beat sends ``ferret.sources.sync_due`` every minute (``ferret.workers.apps.cpu``) and a worker
runs ``sync_due`` below; without one, ``ferret source scheduler`` (or ``ferret serve`` with
``FERRET_EMBEDDED_SCHEDULER=1``) runs ``EmbeddedScheduler``, a thread doing the same every ``interval_s``. Both
read the schedule from the source rows, so either can be used and a sync that overruns its period is not started
twice by the same scheduler (a source with a run in progress is not due).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from ferret.core.db.models import SyncRun
from ferret.core.index.backend import IndexBackend
from ferret.core.settings import FerretSettings
from ferret.core.sources.service import ConnectorBuilder, due_sources, sync_source
from ferret.core.sources.sync import SyncFailedError

logger = logging.getLogger(__name__)


def sync_due(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    build: ConnectorBuilder,
    now: datetime | None = None,
) -> list[tuple[str, SyncRun | str]]:
    """Sync every due source once; ``(source name, run or error sentence)`` for each, a failure never stops the rest."""
    results: list[tuple[str, SyncRun | str]] = []
    for source in due_sources(session, now):
        name = source.name
        try:
            results.append((name, sync_source(session, settings, backend, build, source, trigger="schedule")))
        except (SyncFailedError, Exception) as error:
            logger.warning("scheduled sync of %s failed: %s", name, error)
            session.rollback()
            results.append((name, str(error)))
    return results


class EmbeddedScheduler:
    """A daemon thread that calls ``tick`` every ``interval_s`` until ``stop``; ``tick`` opens its own session."""

    def __init__(self, tick: Callable[[], object], interval_s: float = 60.0) -> None:
        self.tick = tick
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ferret-source-scheduler", daemon=True)

    def start(self) -> EmbeddedScheduler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                logger.exception("scheduled source syncs failed; trying again at the next tick")
            self._stop.wait(self.interval_s)
