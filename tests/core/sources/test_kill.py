"""A sync killed with SIGKILL half-way (a real separate process, as a worker dies) resumes from its last checkpoint
with nothing lost and nothing duplicated, and the run the dead process left behind is closed as interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from connectors.servers.uvicorn_thread import RunningApp
from connectors.servers.uvicorn_thread import serve as serve_app
from connectors.servers.website import Site
from ferret.connectors.registry import build_connector
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.models import Document, Source, SyncRun, SyncState
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import FerretSettings
from ferret.core.sources.service import sync_source
from ferret_testing import free_port

PAGES = 30
CHILD = textwrap.dedent(
    """
    import sys
    from ferret.connectors.registry import build_connector
    from ferret.core.db.engine import session_scope
    from ferret.core.db.models import Source
    from ferret.core.index.edge_backend import EdgeIndexBackend
    from ferret.core.settings import FerretSettings
    from ferret.core.sources.service import sync_source

    settings = FerretSettings(home=sys.argv[1])
    backend = EdgeIndexBackend(settings.qdrant_path)
    with session_scope(settings.database_url) as session:
        source = session.query(Source).one()
        sync_source(session, settings, backend, build_connector, source, checkpoint_every=4)
    """
)


@pytest.fixture
def slow_site() -> Iterator[tuple[Site, RunningApp]]:
    site = Site(delay_s=0.25)
    for index in range(PAGES):
        site.put(f"/kb/page-{index:02d}", f"Page {index}", f"Field report {index} on glacier {index} and its ice.")
    app = serve_app(site.app(), free_port())
    yield site, app
    app.stop()


@pytest.mark.slow
def test_a_killed_sync_resumes_without_loss_or_duplicates(
    settings: FerretSettings, database_url: str, slow_site: tuple[Site, RunningApp]
) -> None:
    _, app = slow_site
    with session_scope(database_url) as session:
        corpus = create_corpus(session, "kb")
        config = {"start_urls": [f"{app.url}/"], "acl": {f"{app.url}/": ["staff"]}}
        session.add(Source(corpus_id=corpus.id, name="site", kind="web", config=config))

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(settings.home)], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 180
        stored = 0
        while time.monotonic() < deadline and stored < 8 and child.poll() is None:
            time.sleep(0.2)
            with session_scope(database_url) as session:
                stored = session.scalar(select(func.count(Document.id))) or 0
        assert child.poll() is None, "the sync finished before it could be killed"
        assert stored >= 8
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()

    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with session_scope(database_url) as session:
            killed = session.scalars(select(SyncRun)).one()
            assert killed.state == SyncState.RUNNING  # what the dead process left behind
            persisted = session.scalar(select(func.count(Document.id))) or 0
            assert 8 <= persisted < PAGES
            source = session.scalars(select(Source)).one()
            run = sync_source(session, settings, backend, build_connector, source, checkpoint_every=4)

            assert run.state == SyncState.SUCCEEDED and run.counts["resumed"]
            assert run.counts["new"] == PAGES - persisted  # it went on from the checkpoint, not from the start
            ids = list(session.scalars(select(Document.external_id)))
            assert len(ids) == len(set(ids)) == PAGES
            session.refresh(killed)
            assert killed.state == SyncState.FAILED and "interrupted" in (killed.error or "")
    finally:
        backend.close()
