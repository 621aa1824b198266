"""The Streamlit admin page, run by Streamlit's own test harness (``AppTest``) against a real FERRET_HOME: an
embedded SQLite database and Qdrant Edge holding a corpus with two index versions built by the real MiniLM, a task
and a job. Clicking promote and roll back must switch the active version in the database and in the alias."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import create_corpus, get_corpus
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.models import IndexState, Job, JobState, RetrievalTask, TaskExample
from ferret.core.db.task import add_task
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.runtime.context import app_context

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin" / "app.py"
TIMEOUT_S = 120  # the first run loads the encoder stack; the benchmark machine is busy

DOCUMENTS = {
    "paris.md": "# Paris\n\nParis is the capital and largest city of France, on the Seine.",
    "jupiter.md": "# Jupiter\n\nJupiter is the largest planet of the solar system, a gas giant.",
    "espresso.md": "# Espresso\n\nEspresso is coffee brewed by forcing hot water through fine grounds.",
}


@pytest.fixture
def populated_home(ferret_home: Path, tmp_path: Path) -> Path:
    """Corpus ``kb`` with versions 1 (active) and 2 (ready, never active), task ``kb-qa`` and a running job."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(text, encoding="utf-8")
    with app_context() as context:
        corpus = create_corpus(context.session, "kb", description="Three facts")
        Ingestor(context.session, context.settings, context.backend, corpus).run(
            FilesystemConnector(root=str(folder), name="docs")
        )
        model = ModelRegistry(context.session, context.settings).ensure_base()
        versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
        versions.promote(versions.build(model))
        versions.build(model)
        add_task(
            context.session,
            RetrievalTask(
                name="kb-qa",
                corpus_id=corpus.id,
                description="Answer questions about the facts",
                examples=[TaskExample(position=0, query="capital of France", document_text="Paris is ...")],
            ),
        )
        context.session.add(
            Job(kind="index_build", corpus_id=corpus.id, state=JobState.RUNNING, stage="embed", progress=0.4)
        )
    return ferret_home


def active_versions() -> tuple[dict[int, IndexState], str | None]:
    """(version -> state) of corpus kb, and the collection its alias points at."""
    with app_context() as context:
        corpus = get_corpus(context.session, "kb")
        states = {v.version: v.state for v in list_index_versions(context.session, corpus)}
        return states, context.backend.resolve_alias("kb")


def run_page(app: AppTest | None = None) -> AppTest:
    app = app or AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


def test_page_lists_corpora_versions_tasks_and_jobs(populated_home: Path) -> None:
    app = run_page()

    assert app.title[0].value == "Ferret admin"
    assert [tab.label for tab in app.tabs] == ["Corpora (1)", "Tasks (1)", "Jobs (1)"]
    assert app.subheader[0].value == "kb"
    assert {metric.label: metric.value for metric in app.metric} == {
        "Documents": "3",
        "Passages": "3",
        "Active version": "v1",
    }
    versions, tasks, jobs = (frame.value for frame in app.dataframe)
    assert list(versions["version"]) == [2, 1]  # newest first
    assert list(versions["active"]) == [False, True]
    assert list(versions["state"]) == ["ready", "active"]
    assert list(tasks["task"]) == ["kb-qa"]
    assert list(tasks["examples"]) == ["1"]
    assert list(jobs["state"]) == ["running"]
    assert list(jobs["progress"]) == [40]
    assert any(caption.value.startswith("Database: sqlite") for caption in app.caption)
    # Version 2 was never active, so there is nothing to roll back to yet.
    assert app.button(key="rollback-kb").disabled
    assert not app.button(key="promote-kb-2").disabled


def test_promote_then_roll_back_switch_the_active_version_and_the_alias(populated_home: Path) -> None:
    app = run_page()

    app.button(key="promote-kb-2").click()
    run_page(app)

    assert app.success[0].value == "kb: version 2 is active (collection kb__v2)."
    assert active_versions() == ({1: IndexState.READY, 2: IndexState.ACTIVE}, "kb__v2")
    assert app.metric[2].value == "v2"
    assert not app.button(key="rollback-kb").disabled

    app.button(key="rollback-kb").click()
    run_page(app)

    assert app.success[0].value == "kb: rolled back to version 1 (collection kb__v1)."
    assert active_versions() == ({1: IndexState.ACTIVE, 2: IndexState.READY}, "kb__v1")
    assert app.metric[2].value == "v1"


def test_page_reports_an_empty_home_without_failing(ferret_home: Path) -> None:
    app = run_page()

    assert [tab.label for tab in app.tabs] == ["Corpora (0)", "Tasks (0)", "Jobs (0)"]
    assert app.info[0].value.startswith("No corpora yet")
