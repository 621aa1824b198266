"""What every command needs: settings, a migrated database session and the index backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.orm import Session

from ferret.core.db.engine import session_scope
from ferret.core.db.job import fail_orphaned_jobs
from ferret.core.errors import FerretError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.factory import open_backend
from ferret.core.settings import FerretSettings, get_settings


@dataclass
class AppContext:
    settings: FerretSettings
    session: Session
    backend: IndexBackend


def ensure_schema(settings: FerretSettings) -> None:
    """The embedded SQLite database migrates itself; a server database must be migrated by `ferret db upgrade`."""
    from ferret.core.db import migrate

    url = settings.database_url
    if url.startswith("sqlite"):
        migrate.upgrade(url)
        return
    current, head = migrate.current_revision(url), migrate.head_revision()
    if current != head:
        raise FerretError(f"The database is at revision {current or 'none'}, not {head}; run `ferret db upgrade`.")


@contextmanager
def app_context() -> Iterator[AppContext]:
    settings = get_settings()
    settings.ensure_home()
    ensure_schema(settings)
    backend = open_backend(settings)
    try:
        with session_scope(settings.database_url) as session:
            if fail_orphaned_jobs(session):  # embedded jobs of a process that has exited
                session.commit()
            yield AppContext(settings, session, backend)
    finally:
        backend.close()
