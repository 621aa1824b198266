"""The admin (``AppTest``) and the terminal client on the server deployment's database: PostgreSQL started by the
suite (conftest's ``postgres_home``), with the index in embedded Qdrant Edge, since no Qdrant server runs here.
Every page that writes is driven through its action: promote and roll back, an API key created and revoked, a
source added and synced as a job; the overview and the playground read what they wrote."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

from ferret.core.db.api_key import list_api_keys
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.job import get_job
from ferret.core.db.models import IndexState, JobState
from ferret.ui.runtime import open_context
from ferret.ui.tui.search_client import LocalSearchClient

pytestmark = pytest.mark.integration

VIEWS = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin" / "views"
TIMEOUT_S = 120


def page(name: str) -> AppTest:
    return AppTest.from_file(str(VIEWS / f"{name}.py"), default_timeout=TIMEOUT_S)


def run(app: AppTest) -> AppTest:
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


def live_versions() -> dict[int, IndexState]:
    with open_context() as context:
        return {v.version: v.state for v in list_index_versions(context.session, get_corpus(context.session, "kb"))}


def test_every_writing_page_on_postgresql(postgres_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_context() as context:
        assert context.settings.database_url.startswith("postgresql")

    overview = run(page("overview"))
    assert {metric.label: metric.value for metric in overview.metric} == {
        "Corpora": "1",
        "Running jobs": "1",
        "Tasks": "1",
    }
    assert overview.dataframe[0].value.iloc[0]["documents"] == 6
    assert any(caption.value.startswith("Database: postgresql") for caption in overview.caption)

    versions = run(page("evaluation"))
    versions.button(key="promote-kb-2").click()
    run(versions)
    assert versions.success[0].value == "kb: version 2 is active (collection kb__v2)."
    assert live_versions() == {1: IndexState.READY, 2: IndexState.ACTIVE}
    versions.button(key="rollback-kb").click()
    run(versions)
    assert live_versions() == {1: IndexState.ACTIVE, 2: IndexState.READY}

    access = run(page("access"))
    access.text_input(key="key-name").input("pg-bot")
    access.multiselect(key="key-scopes").select("ingest")
    access.button[0].click()
    run(access)
    assert access.success[0].value == "Created API key pg-bot; copy it now: only its hash is kept."
    access.button(key="revoke-key").click()
    run(access)
    with open_context() as context:
        assert [key.name for key in list_api_keys(context.session)] == []

    # A source synced as a job: the job's row, its JSON parameters (queried by path) and the sync run on PostgreSQL.
    table = tmp_path / "faq.sqlite"
    with sqlite3.connect(table) as connection:
        connection.execute("CREATE TABLE faq (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        connection.execute("INSERT INTO faq VALUES (1, 'Badges', 'Lost badges are replaced at the front desk.')")
    monkeypatch.setenv("FAQ_URL", f"sqlite:///{table}")
    config = {"url": {"env": "FAQ_URL"}, "table": "faq", "title_column": "title", "text_columns": ["body"]}
    sources = run(page("sources"))
    sources.text_area(key="source-definition").input(
        json.dumps({"corpus": "kb", "name": "faq", "kind": "sql", "config": config})
    )
    sources.button(key="save-source").click()
    run(sources)
    assert "Source faq (sql) of corpus kb added: synced on demand." in [s.value for s in sources.success]
    run(sources)  # the table above the form lists it from this run on
    sources.selectbox(key="source-choice").select("faq")
    run(sources)
    sources.button(key="sync-source").click()
    run(sources)
    (started,) = [s.value for s in sources.success if "started: sync of source faq" in s.value]
    job_id = int(started.split()[1])
    with open_context() as context:
        assert context.jobs.wait(job_id, timeout_s=120)
        assert get_job(context.session, job_id).state == JobState.SUCCEEDED
    run(sources)
    assert any(s.value.startswith("sync 1 succeeded: new 1, changed 0") for s in sources.success)
    sources.button(key="sync-source").click()  # a second sync of the source, now that the first one ended
    run(sources)
    assert any(f"Job {job_id + 1} started: sync of source faq." == s.value for s in sources.success)
    with open_context() as context:
        assert context.jobs.wait(job_id + 1, timeout_s=120)

    playground = run(page("playground"))
    playground.text_input(key="playground-query").input("lost badge front desk")
    run(playground)
    headings = [m.value for m in playground.markdown if m.value.startswith("**1. ")]
    assert len(headings) == 2 and all("Badges" in h for h in headings)  # the synced row is searchable on both sides

    # The terminal client's local store is the same database: search, then a document in context.
    client = LocalSearchClient()
    try:
        hits = client.search("kb", "lost badge front desk", configuration="hybrid")
        assert hits[0].title == "Badges" and hits[0].source == "faq"
        view = client.document(hits[0])
        assert "front desk" in view.passages[view.hit_position] and ("groups", "public") in view.details
        assert client.configurations("kb") == ["hybrid", "dense", "sparse", "config base"]
    finally:
        client.close()
