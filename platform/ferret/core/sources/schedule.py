"""Periodic syncs: which sources are due, and the embedded scheduler that syncs them without a broker.

With a broker, Celery beat sends ``ferret.sources.sync_due`` every minute (``ferret.workers.apps.cpu``) and a CPU
worker runs ``sync_due`` below; without one, ``ferret source scheduler`` is the embedded scheduler: a loop doing the
same every ``--interval`` seconds. Both read the schedule from the source rows, and a source with a sync still going
is not due, so an overrunning sync is not started twice (``ferret.core.db.source.sync_run_alive``: the process of a
sync of this host is checked; one of another host counts as going for six hours from its start).
"""

from __future__ import annotations

import logging
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
