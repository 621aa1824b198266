"""A source sync started as a job (the admin's "Sync now") runs on a real Celery CPU worker over a real Redis
broker: its task comes from the job catalogue, with nothing written for it in ``ferret.workers``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.connectors.registry import build_connector
from ferret.core.db.models import Document, JobState, SyncRun, SyncState
from ferret.core.sources.config import parse_spec
from ferret.core.sources.service import add_source
from ferret.workers.dispatch import Dispatcher

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_sync_job_runs_on_the_cpu_worker(
    session: Session, workers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "faq.sqlite"
    with sqlite3.connect(table) as connection:
        connection.execute("CREATE TABLE faq (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        connection.executemany(
            "INSERT INTO faq VALUES (?, ?, ?)", [(n, f"Question {n}", f"Answer number {n}.") for n in range(5)]
        )
    url = f"sqlite:///{table}"
    monkeypatch.setenv("FAQ_URL", url)  # the secret reference resolves here (add) and on the worker (sync)
    config = {"url": {"env": "FAQ_URL"}, "table": "faq", "title_column": "title", "text_columns": ["body"]}
    source = add_source(
        session, parse_spec({"corpus": "help", "name": "faq", "kind": "sql", "config": config}), build_connector
    )
    session.commit()
    cpu = workers.start("cpu", FAQ_URL=url)
    workers.wait_ready(cpu)

    job = Dispatcher(workers.settings).start_job("source_sync", session, source=source, trigger="admin")
    assert job.celery_id == f"ferret-job-{job.id}-sync"
    finished = workers.wait_for(job.id, lambda j: j.state in (JobState.SUCCEEDED, JobState.FAILED))

    assert finished.state == JobState.SUCCEEDED, finished.error + workers.logs()
    assert "ferret.sources.sync_source" in cpu.tail(400)
    assert finished.result is not None and finished.result["new"] == 5 and finished.counts["new"] == 5
    session.expire_all()
    run = session.get(SyncRun, finished.result["sync_run"])
    assert run is not None and run.state == SyncState.SUCCEEDED and run.trigger == "admin"
    assert session.scalar(select(func.count(Document.id))) == 5
