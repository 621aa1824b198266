"""Fixtures of the admin and terminal-client tests: a real FERRET_HOME (embedded SQLite and Qdrant Edge) holding a
small corpus indexed by the real MiniLM, the same data on a real PostgreSQL server (the server deployment's database;
``start_postgres`` of tests/core/db), and a real ``ferret serve`` API (uvicorn on 127.0.0.1 in a thread of the test
process) for the remote client.

Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.api_key import create_api_key
from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import Job, JobState, RetrievalTask, TaskExample
from ferret.core.db.task import add_task
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.ui.runtime import close_runtime, open_context
from ferret_testing import free_port, running_process, skip_or_fail

DOCUMENTS = {
    "paris.md": "# Paris\n\nParis is the capital and largest city of France, on the river Seine.",
    "jupiter.md": "# Jupiter\n\nJupiter is the largest planet of the solar system, a gas giant with a red spot.",
    "espresso.md": "# Espresso\n\nEspresso is coffee brewed by forcing hot water through finely ground beans.",
    "tides.md": "# Tides\n\nOcean tides rise and fall twice a day, pulled by the gravity of the moon.",
    "bread.md": "# Bread\n\nBread dough rises because yeast ferments sugar and releases carbon dioxide gas.",
    "glaciers.md": "# Glaciers\n\nGlaciers are slow rivers of ice that carve valleys as they move down mountains.",
}


def populate(folder: Path) -> None:
    """Corpus ``kb`` (six one-paragraph documents) with versions 1 (active) and 2 (ready, never active), task
    ``kb-qa`` with one example and a running index-build job."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(text, encoding="utf-8")
    with open_context() as context:
        corpus = create_corpus(context.session, "kb", description="Six facts")
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
    close_runtime()  # the index is flushed and closed before the folder is copied


@pytest.fixture(scope="session")
def populated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``populate`` run once per session into a FERRET_HOME that tests copy (embedding twice per test is slow)."""
    from ferret.core.settings import get_settings

    root = tmp_path_factory.mktemp("ui-template")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FERRET_HOME", str(root / "home"))
        patch.delenv("FERRET_DATABASE_URL", raising=False)
        patch.delenv("FERRET_QDRANT_URL", raising=False)
        get_settings.cache_clear()
        try:
            populate(root / "docs")
        finally:
            get_settings.cache_clear()
    return root / "home"


@pytest.fixture
def populated_home(ferret_home: Path, populated_template: Path) -> Path:
    """A FERRET_HOME of this test holding corpus ``kb`` (see ``populate``); FERRET_HOME points at it."""
    shutil.copytree(populated_template, ferret_home)
    return ferret_home


def _db_conftest() -> Any:
    """tests/core/db/conftest.py as a module, for ``start_postgres`` (conftests cannot be imported by name)."""
    path = Path(__file__).resolve().parent.parent / "core" / "db" / "conftest.py"
    spec = importlib.util.spec_from_file_location("ferret_tests_ui_db_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ui_postgres_url() -> Iterator[str]:
    """An empty database on a PostgreSQL cluster started for the session (Debian's ``postgresql`` binaries)."""
    db_conftest = _db_conftest()
    folder = Path(tempfile.mkdtemp(prefix="ferret-pg-ui-"))
    try:
        try:
            url, stop = db_conftest.start_postgres(folder)
        except db_conftest.PostgresNotInstalled as error:
            skip_or_fail(str(error), "`make system-deps` installs PostgreSQL")
            raise
        try:
            yield url
        finally:
            stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_home(
    ferret_home: Path, ui_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """``populate``'s corpus with the database on PostgreSQL (FERRET_DATABASE_URL, emptied first) and the index and
    files in FERRET_HOME: the admin as a server deployment runs it, but for the Qdrant server."""
    from sqlalchemy import create_engine, pool, text

    from ferret.core.db.migrate import upgrade
    from ferret.core.settings import get_settings

    engine = create_engine(ui_postgres_url, poolclass=pool.NullPool)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    upgrade(ui_postgres_url)  # a server database is migrated by `ferret db upgrade`, never by the admin
    monkeypatch.setenv("FERRET_DATABASE_URL", ui_postgres_url)
    get_settings.cache_clear()
    populate(tmp_path / "docs")
    yield ferret_home
    close_runtime()  # its pooled connections would hold the database the next test drops


@dataclass(frozen=True)
class RunningApi:
    url: str
    search_key: str
    """A key with the search scope (groups: none, so public documents only)."""


@pytest.fixture
def running_api(populated_home: Path) -> Iterator[RunningApi]:
    """The real HTTP API (``create_app`` under uvicorn) on a free loopback port, over ``populated_home``."""
    import uvicorn

    from ferret.api.app import create_app
    from ferret.core.settings import get_settings

    with open_context() as context:
        _, key = create_api_key(context.session, "tui", ["search"], [])
        context.session.commit()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(get_settings()), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.2)
    try:
        yield RunningApi(url, key)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="session")
def generator_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real generator behind an OpenAI-compatible endpoint: llama.cpp's server (``make llm-deps``) on the SmolLM2
    GGUF that the embedded backend uses, on a loopback port. The embedded transformers backend answers the same
    prompts but takes minutes on a busy 2-core machine; the server answers in about a second."""
    try:
        import llama_cpp.server  # noqa: F401

        from ferret.core.llm.local_backend import default_generator_path

        model = default_generator_path()
    except Exception as error:
        skip_or_fail(f"llama-cpp-python[server] or the SmolLM2 package is missing ({error}).")
        raise
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    url = f"http://127.0.0.1:{port}/v1"
    with running_process(command, ready_url=f"{url}/models", log=log, timeout_s=180):
        yield url


@pytest.fixture
def use_generator(generator_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point this test's settings at the llama.cpp generator."""
    from ferret.core.settings import get_settings

    monkeypatch.setenv("FERRET_LLM_BASE_URL", generator_url)
    monkeypatch.setenv("FERRET_LLM_MODEL", "smollm2")
    get_settings.cache_clear()
    return generator_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio; anyio's pytest plugin runs the async tests
