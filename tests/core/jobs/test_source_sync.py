"""A configured source's sync as a job (``ferret.core.jobs.source_sync``), run as embedded mode and the workers run
it, on a real SQLite source table read by the sql connector: the job's result and counts, the refusals before any
row is written, and a cancel that stops the sync at its next checkpoint."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.connectors.beir.connector import BeirConnector
from ferret.connectors.registry import build_connector
from ferret.connectors.sql.connector import SqlConnector
from ferret.core.db.engine import session_scope
from ferret.core.db.job import get_job, request_cancel
from ferret.core.db.models import Document, Job, JobState, Source, SyncRun, SyncState
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.jobs.catalog import pipeline_of
from ferret.core.jobs.progress import JobCancelled, JobProgress
from ferret.core.jobs.runner import run_job
from ferret.core.jobs.source_sync import SOURCE_SYNC, run_source_sync, start_payload, sync_jobs
from ferret.core.pipeline.declaration import StageContext, WorkerQueue
from ferret.core.settings import FerretSettings
from ferret.core.sources.config import parse_spec
from ferret.core.sources.service import add_source


@pytest.fixture
def source(session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Source:
    """Source ``notes`` of corpus ``help``: 150 rows of a SQLite table with an update time, so the sync can stop
    at a row (a checkpoint every 100 documents)."""
    path = tmp_path / "notes.sqlite"
    start = datetime(2026, 1, 1)
    rows = [(n, f"Note {n}", f"Body of note {n}.", str(start + timedelta(seconds=n))) for n in range(150)]
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT, updated TIMESTAMP)")
        connection.executemany("INSERT INTO notes VALUES (?, ?, ?, ?)", rows)
    monkeypatch.setenv("NOTES_URL", f"sqlite:///{path}")  # SQLite hands TIMESTAMP columns back as text
    config = {
        "url": {"env": "NOTES_URL"},
        "table": "notes",
        "title_column": "title",
        "text_columns": ["body"],
        "updated_column": "updated",
    }
    spec = parse_spec({"corpus": "help", "name": "notes", "kind": "sql", "config": config})
    added = add_source(session, spec, build_connector)
    session.commit()
    return added


def test_declared_once_on_the_cpu_queue() -> None:
    assert pipeline_of("source_sync") is SOURCE_SYNC
    (stage,) = SOURCE_SYNC.stages
    assert stage.queue == WorkerQueue.CPU and stage.task == "ferret.sources.sync_source"


def test_a_sync_job_runs_the_sync_and_keeps_its_report(
    settings: FerretSettings, session: Session, source: Source
) -> None:
    job, payload = start_payload(session, source, SqlConnector, trigger="admin")
    session.commit()
    run_job(settings, SOURCE_SYNC, payload, connectors=build_connector)

    session.expire_all()
    finished = get_job(session, job.id)
    assert finished.state == JobState.SUCCEEDED and finished.progress == 1.0, finished.error
    run = session.get(SyncRun, finished.result["sync_run"])  # type: ignore[index]
    assert run is not None and run.state == SyncState.SUCCEEDED and run.trigger == "admin"
    assert finished.result is not None and (finished.result["new"], finished.result["skipped"]) == (150, 0)
    assert finished.counts["new"] == 150 and finished.counts["changed"] == 0
    assert sync_jobs(session, source) == [finished]


def test_refusals_write_nothing(session: Session, source: Source) -> None:
    with pytest.raises(InvalidInputError, match="cannot be a scheduled source"):
        start_payload(session, source, BeirConnector, trigger="admin")
    assert session.scalar(select(func.count(Job.id))) == 0

    queued, _ = start_payload(session, source, SqlConnector, trigger="admin")
    session.commit()
    with pytest.raises(ConflictError, match=f"already syncing in job {queued.id}"):
        start_payload(session, source, SqlConnector, trigger="admin")
    assert session.scalar(select(func.count(Job.id))) == 1


def test_a_cancel_stops_the_sync_at_its_next_checkpoint(
    settings: FerretSettings, session: Session, source: Source
) -> None:
    job, payload = start_payload(session, source, SqlConnector, trigger="admin")
    session.commit()
    request_cancel(session, job.id)
    session.commit()
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with session_scope(settings.database_url) as stage_session:
            progress = JobProgress(settings.database_url, job.id, stage="sync")
            context = StageContext(
                stage_session, settings, progress, index_backend=backend, connector_factory=build_connector
            )
            with pytest.raises(JobCancelled):  # not a failed sync: the job runner marks the job cancelled
                run_source_sync(context, payload)
    finally:
        backend.close()
    session.expire_all()
    (run,) = session.scalars(select(SyncRun))
    assert run.state == SyncState.FAILED and run.counts["new"] == 100  # the first checkpoint stays committed
    assert session.scalar(select(func.count(Document.id))) == 100
