"""The admin's Sources page under ``AppTest``, against the real populated store of conftest.py and a real ``sql``
source: a SQLite file made here and read by the sql connector, so every sync really runs (new, changed, deleted,
skipped with its reason) and the page shows the domain's reports and one-sentence errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

from ferret.core.db.corpus import get_corpus
from ferret.core.db.job import get_job
from ferret.core.db.source import list_sources
from ferret.ui.runtime import open_context

VIEWS = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin" / "views"
TIMEOUT_S = 120


def run(app: AppTest) -> AppTest:
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


def definition(**config_extra: object) -> str:
    config: dict[str, object] = {
        "url": {"env": "KB_URL"},
        "table": "articles",
        "title_column": "title",
        "text_columns": ["body"],
    }
    config.update(config_extra)
    return json.dumps({"corpus": "kb", "name": "articles", "kind": "sql", "schedule_minutes": 30, "config": config})


@pytest.fixture
def articles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three rows, one without text (skipped with a reason); KB_URL holds the URL the definition refers to."""
    path = tmp_path / "articles.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        connection.executemany(
            "INSERT INTO articles VALUES (?, ?, ?)",
            [
                (1, "Refunds", "Refunds take five days."),
                (2, "Holidays", "The office closes in August."),
                (3, "Empty", ""),
            ],
        )
    monkeypatch.setenv("KB_URL", f"sqlite:///{path}")
    return path


def captions(app: AppTest) -> list[str]:
    return [caption.value for caption in app.caption]


def sync_as_job(app: AppTest) -> int:
    """Click "Sync now": the page starts a job and answers at once; wait for the job, then re-read the page."""
    app.button(key="sync-source").click()
    run(app)
    started = [m for m in messages(app) if m.startswith("Job ") and "started: sync of source articles" in m]
    assert started, messages(app)
    job_id = int(started[0].split()[1])
    with open_context() as context:
        assert context.jobs.wait(job_id, timeout_s=120)
        assert get_job(context.session, job_id).kind == "source_sync"
    run(app)
    return job_id


def messages(app: AppTest) -> list[str]:
    return [element.value for element in [*app.success, *app.error, *app.info]]


def test_add_sync_edit_and_remove_a_sql_source(populated_home: Path, articles: Path) -> None:
    app = run(AppTest.from_file(str(VIEWS / "sources.py"), default_timeout=TIMEOUT_S))
    assert list(app.dataframe[0].value["name"]) == ["docs"]  # the ingested folder of conftest's populate

    app.text_area(key="source-definition").input(definition(password="hunter2"))
    app.button(key="save-source").click()
    run(app)
    assert [error.value for error in app.error] == [
        "config.password holds a plain-text secret; write it as {env: VARIABLE} or {file: /path} so it is never "
        "stored in the database."
    ]
    assert not any("hunter2" in message for message in messages(app))
    app.text_area(key="source-definition").input("corpus: [kb")
    app.button(key="save-source").click()
    run(app)
    assert len(app.error) == 1 and app.error[0].value.startswith("The source definition is not valid YAML or JSON")
    app.text_area(key="source-definition").input(definition(table="article"))  # the access check reads the table
    app.button(key="save-source").click()
    run(app)
    assert [error.value for error in app.error] == [
        "SQL source could not read columns body, id, title of table article at {env: KB_URL} (no such table: "
        "article); check table, db_schema and the column names; nothing was stored (`--no-check` stores the source "
        "without this check)."
    ]
    assert list(app.dataframe[0].value["name"]) == ["docs"]

    app.text_area(key="source-definition").input(definition())
    app.button(key="save-source").click()
    run(app)
    assert "Source articles (sql) of corpus kb added: synced every 30 min." in messages(app)
    run(app)
    table = app.dataframe[0].value.set_index("name")
    assert table.loc["articles", "schedule"] == "every 30 min" and table.loc["articles", "kind"] == "sql"
    assert table.loc["articles", "last sync"] == "never synced"
    app.selectbox(key="source-choice").select("articles")
    run(app)

    job_id = sync_as_job(app)
    report = app.success[0].value
    assert report.startswith("sync 1 succeeded: new 2, changed 0, unchanged 0, deleted 0"), report
    assert "skipped 1" in report
    assert any(f"Job {job_id} · source_sync · succeeded" in m.value for m in app.markdown)
    assert "new 2 · changed 0 · unchanged 0 · deleted 0 · permission updates 0 · skipped 1" in captions(app)
    skipped = app.dataframe[1].value
    assert list(skipped["item"]) == ["3"] and list(skipped["reason"]) == ["no text in the text columns"]

    with sqlite3.connect(articles) as connection:
        connection.execute("UPDATE articles SET body = 'Refunds take ten days.' WHERE id = 1")
        connection.execute("DELETE FROM articles WHERE id = 2")
    assert sync_as_job(app) == job_id + 1
    report = app.success[0].value
    assert report.startswith("sync 2 succeeded: new 0, changed 1, unchanged 0, deleted 1"), report
    history = [m.value for m in app.markdown if "succeeded" in m.value and "source_sync" not in m.value]
    assert len(history) == 2 and "sync 2 succeeded" in history[0] and "sync 1 succeeded" in history[1]
    app.checkbox(key="sync-full").check()
    run(app)
    app.button(key="sync-source").click()
    run(app)
    assert any(m.startswith(f"Job {job_id + 2} started: full sync of source articles") for m in messages(app))
    with open_context() as context:
        assert context.jobs.wait(job_id + 2, timeout_s=120)
        assert get_job(context.session, job_id + 2).params["full"] is True
    app.checkbox(key="sync-full").uncheck()
    run(app)

    app.button(key="edit-source").click()
    run(app)
    stored = str(app.text_area(key="source-definition").value)
    assert "env: KB_URL" in stored and str(articles) not in stored  # the reference, never the resolved value
    assert app.checkbox(key="source-replace").value is True
    app.text_area(key="source-definition").input(stored.replace("schedule_minutes: 30", "schedule_minutes: 15"))
    app.button(key="save-source").click()
    run(app)
    assert "Source articles (sql) of corpus kb replaced: synced every 15 min." in messages(app)

    app.button(key="remove-source").click()
    run(app)
    assert "Source articles removed with its 1 documents." in messages(app)
    with open_context() as context:
        assert [s.name for s in list_sources(context.session, get_corpus(context.session, "kb"))] == ["docs"]


def test_a_missing_secret_reference_is_one_sentence_and_nothing_is_stored(
    populated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KB_URL", raising=False)
    app = run(AppTest.from_file(str(VIEWS / "sources.py"), default_timeout=TIMEOUT_S))
    app.text_area(key="source-definition").input(definition())
    app.button(key="save-source").click()
    run(app)
    assert [error.value for error in app.error] == ["config.url reads environment variable KB_URL, which is not set."]
    with open_context() as context:
        assert [s.name for s in list_sources(context.session, get_corpus(context.session, "kb"))] == ["docs"]
