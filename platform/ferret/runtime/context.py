"""What every face needs, built once: settings, a migrated database, the index backend, the job queue, connectors.

``open_runtime`` is used by the HTTP API (its lifespan), ``app_context`` by every CLI command and the admin page
(the runtime plus one session). This is the only module that wires adapters (``ferret.connectors``,
``ferret.workers``) into the domain (``ferret.core``).

Example:
    >>> with app_context() as ctx:
    ...     ctx.jobs.start_job("index_build", ctx.session, corpus="docs", model="base", promote=True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

from sqlalchemy.orm import Session, sessionmaker

from ferret.connectors.registry import build_connector
from ferret.core.db import migrate
from ferret.core.db.engine import get_engine, session_scope
from ferret.core.db.job import fail_orphaned_jobs
from ferret.core.db.source import close_orphaned_sync_runs
from ferret.core.db.synthetic import interrupt_orphaned_runs
from ferret.core.errors import FerretError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.factory import open_backend
from ferret.core.jobs.queue import JobQueue
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings, get_settings
from ferret.core.sources.capabilities import ConnectorFactory


@dataclass(frozen=True)
class Runtime:
    """The parts of one process: one index backend, one session factory, one job queue, the connector registry."""

    settings: FerretSettings
    sessions: sessionmaker[Session]
    backend: IndexBackend
    connectors: ConnectorFactory
    searcher: Searcher
    """The process's one searcher: its caches live as long as the backend it queries."""
    job_queue: Callable[[], JobQueue] = field(repr=False)
    """Builds the job queue on first use (``jobs``)."""

    @cached_property
    def jobs(self) -> JobQueue:
        """The job queue, built when a command first starts or cancels a job: the dispatcher imports the job
        catalogue (every pipeline's declaration; the one-step jobs' ingest, index build and evaluation), which a
        search or a listing never needs (issue 11, item 9)."""
        return self.job_queue()


@dataclass
class AppContext:
    """A runtime and one session: what a CLI command or an admin action works with."""

    runtime: Runtime
    session: Session

    @property
    def settings(self) -> FerretSettings:
        return self.runtime.settings

    @property
    def backend(self) -> IndexBackend:
        return self.runtime.backend

    @property
    def jobs(self) -> JobQueue:
        return self.runtime.jobs

    @property
    def connectors(self) -> ConnectorFactory:
        return self.runtime.connectors

    @property
    def searcher(self) -> Searcher:
        return self.runtime.searcher


def ensure_schema(settings: FerretSettings) -> None:
    """The embedded SQLite database migrates itself; a server database must be migrated by `ferret db upgrade`."""
    url = settings.database_url
    if url.startswith("sqlite"):
        migrate.upgrade(url)
        return
    current, head = migrate.current_revision(url), migrate.head_revision()
    if current != head:
        raise FerretError(f"The database is at revision {current or 'none'}, not {head}; run `ferret db upgrade`.")


def _dispatcher(settings: FerretSettings) -> JobQueue:
    from ferret.workers.dispatch import Dispatcher

    return Dispatcher(settings)


@contextmanager
def open_runtime(settings: FerretSettings | None = None) -> Iterator[Runtime]:
    """Home folder, schema, the jobs orphaned by an exited process marked failed, then the parts; closed on exit."""
    settings = settings or get_settings()
    settings.ensure_home()
    ensure_schema(settings)
    sessions = sessionmaker(get_engine(settings.database_url), expire_on_commit=False)
    with sessions() as session:  # embedded jobs of a process that has exited (this one before a restart)
        fail_orphaned_jobs(session)
        interrupt_orphaned_runs(session)  # generation runs of a killed `pipeline run` or worker
        close_orphaned_sync_runs(session)  # and sync runs
        session.commit()
    backend = open_backend(settings)
    searcher = Searcher(settings, backend, sessions)
    try:
        yield Runtime(
            settings=settings,
            sessions=sessions,
            backend=backend,
            job_queue=lambda: _dispatcher(settings),
            connectors=build_connector,
            searcher=searcher,
        )
    finally:
        searcher.close()
        backend.close()


@contextmanager
def app_context(settings: FerretSettings | None = None) -> Iterator[AppContext]:
    """A runtime and a session that commits on success (one CLI command, one admin action)."""
    with open_runtime(settings) as runtime, session_scope(runtime.settings.database_url) as session:
        yield AppContext(runtime, session)
