"""The terminal client where a user's data or setup is not the happy path: titles and ids that look like markup, an
error sentence longer than a line, a corpus named at start that does not exist, no corpus until one is ingested, a
URL that is not a Ferret API, a terminal narrower than 80 columns. Real embedded store (SQLite, Qdrant Edge, the
real MiniLM) and a real HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("textual", reason="the terminal client needs the ui extra: pip install -e '.[ui]'")

from textual.containers import Vertical
from textual.widgets import Static

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import create_corpus
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.ui.runtime import open_context
from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.screens import DocumentScreen, HelpScreen
from ferret.ui.tui.search_client import LocalSearchClient, RemoteSearchClient
from ui.tui_pilot import SIZE, settle, status


def screen_text(app: FerretSearchApp) -> str:
    """What the terminal shows, as plain text."""
    return "\n".join("".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips())


@pytest.mark.anyio
async def test_a_title_and_an_id_that_look_like_markup_show_as_written(populated_home: Path, tmp_path: Path) -> None:
    # Textual parsed them as markup: "[/draft]" raised MarkupError and closed the app when the document opened,
    # and "Copied id: notes [x].md" lost its "[x]".
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "notes [x].md").write_text("# Budget [/draft] notes\n\nThe budget for the harbour is agreed.")
    with open_context() as context:
        corpus = create_corpus(context.session, "odd")
        Ingestor(context.session, context.settings, context.backend, corpus).run(
            FilesystemConnector(root=str(folder), name="files")
        )
        versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
        versions.promote(versions.build(ModelRegistry(context.session, context.settings).ensure_base()))

    app = FerretSearchApp(LocalSearchClient(), corpus="odd")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press(*"harbour budget")
        await settle(pilot)
        assert app.hits[0].external_id == "notes [x].md"
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, DocumentScreen)
        assert str(app.screen.query_one("#document-title", Static).render()) == "Budget [/draft] notes"
        await pilot.press("ctrl+y")
        await settle(pilot)
        assert app.clipboard == "notes [x].md"
        toasts = [str(toast.render()) for toast in app.screen.query("Toast")]
        assert "Copied id: notes [x].md" in " ".join(toasts)


@pytest.mark.anyio
async def test_an_error_longer_than_a_line_is_shown_whole(populated_home: Path) -> None:
    # The status line was one row: "Corpus 'bare' has no active index; run `ferret index build ..." lost the command.
    with open_context() as context:
        create_corpus(context.session, "bare")
    app = FerretSearchApp(LocalSearchClient(), corpus="bare")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"harbour")
        await settle(pilot)
        assert "ferret index build --corpus bare --promote" in status(app)
        assert "ferret index build --corpus bare --promote" in " ".join(screen_text(app).split())
        assert app.query_one("#status").size.height == 2

        await pilot.press("ctrl+o", "down", "enter")  # to kb, whose results say so in a few words
        await settle(pilot)
        assert app.corpus == "kb" and app.query_one("#status").size.height == 1


@pytest.mark.anyio
async def test_a_corpus_named_at_start_that_does_not_exist_is_said_at_once(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="nope")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "Corpus 'nope' does not exist; choose one with Ctrl+O (kb)." in status(app)
        assert app.query_one("#status").has_class("error")


@pytest.mark.anyio
async def test_a_corpus_ingested_after_start_is_found_by_the_next_search(ferret_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "There are no corpora yet" in status(app)
        with open_context() as context:
            create_corpus(context.session, "late")
        await pilot.press(*"harbour")
        await settle(pilot)
        assert app.corpus == "late"  # it said "Choose a corpus first (Ctrl+O)" and never looked again
        assert "Corpus 'late' has no active index" in status(app)


class _LoginPage(BaseHTTPRequestHandler):
    """What a proxy's login page or another service answers: 200 and HTML, whatever the path."""

    def _answer(self) -> None:
        body = b"<html><body>Please sign in</body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def login_page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LoginPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.anyio
async def test_a_url_that_is_not_a_ferret_api_is_one_sentence(ferret_home: Path, login_page: str) -> None:
    # The worker raised JSONDecodeError (or KeyError on another JSON API) and the app closed with a traceback.
    app = FerretSearchApp(RemoteSearchClient(login_page, api_key="fk_x_y"), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        expected = f"{login_page} did not answer GET /v1/corpora as a Ferret API does; check --api"
        assert expected in status(app)
        await pilot.press(*"harbour")
        await settle(pilot)
        assert "did not answer POST /v1/corpora/kb/search as a Ferret API does" in status(app)
        assert app.is_running


@pytest.mark.anyio
async def test_the_help_fits_a_terminal_narrower_than_80_columns(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one(Vertical).region
        assert box.x >= 0 and box.right <= 60
        assert "Ctrl+Q" in screen_text(app)
