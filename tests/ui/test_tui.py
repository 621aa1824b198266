"""The terminal client driven by Textual's Pilot in an 80×24 terminal, against a real embedded store (SQLite,
Qdrant Edge, the real MiniLM) and against the real HTTP API serving the same store."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("textual", reason="the terminal client needs the ui extra: pip install -e '.[ui]'")

from textual.widgets import OptionList

from ferret.core.db.api_key import revoke_api_key
from ferret.core.search.snippets import query_terms
from ferret.ui.runtime import open_context
from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.highlight import snippet_text
from ferret.ui.tui.screens import ChoiceScreen, DocumentScreen, HelpScreen
from ferret.ui.tui.search_client import LocalSearchClient, RemoteSearchClient
from ui.tui_pilot import SIZE, settle, status


def test_highlight_marks_query_words_and_windows_long_text() -> None:
    assert query_terms("What is the capital of France?") == ["capital", "france"]
    text = snippet_text("Paris is the capital and largest city of France.", "capital france")
    marked = [text.plain[span.start : span.end] for span in text.spans]
    assert marked == ["capital", "France"]
    long = "filler words here " * 30 + "the capital of France is Paris " + "more filler " * 30
    window = snippet_text(long, "capital", width=60).plain
    assert "capital" in window and window.startswith("…") and window.endswith("…") and len(window) <= 62


@pytest.mark.anyio
async def test_search_as_you_type_opens_a_document_and_copies(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.corpus == "kb"  # the first corpus, picked when none is given

        await pilot.press(*"capital of France")
        await settle(pilot)

        assert app.hits[0].title == "Paris"
        assert app.hits[0].source == "docs"
        assert "6 results" in status(app)
        assert app.query_one(OptionList).option_count == len(app.hits) == 6

        await pilot.press("down", "up", "down")  # up from the first result to the query and back: still the first
        await settle(pilot)
        assert app.query_one(OptionList).highlighted == 0
        await pilot.press("ctrl+y")
        assert app.clipboard == "paris.md"
        await pilot.press("ctrl+l")
        assert app.clipboard == "ferret://kb/docs/paris.md"

        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DocumentScreen)
        assert "capital and largest city of France" in screen.view.passages[screen.view.hit_position]
        assert ("id", "paris.md") in screen.view.details
        assert ("groups", "public") in screen.view.details
        for switch in ("ctrl+o", "ctrl+g"):  # other results would replace the ones under the open document
            await pilot.press(switch)
            await settle(pilot)
            assert app.screen is screen, switch
        await pilot.press("escape")
        assert not isinstance(app.screen, DocumentScreen)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)  # from the results it opens


@pytest.mark.anyio
async def test_ctrl_n_adds_a_page_of_results_until_there_are_no_more(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), page_size=2)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(*"capital of France")
        await settle(pilot)
        first = [hit.external_id for hit in app.hits]
        assert len(first) == 2 and "2 results (Ctrl+N: more)" in status(app)

        await pilot.press("ctrl+n")
        await settle(pilot)
        assert [hit.external_id for hit in app.hits][:2] == first and len(app.hits) == 4
        assert app.query_one(OptionList).highlighted == 2  # on the first new result
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert len(app.hits) == 6 and "6 results (Ctrl+N: more)" in status(app)  # a full page: there may be more
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert len(app.hits) == 6 and "6 results: there are no more." in status(app)

        await pilot.press("backspace")  # a new query starts from one page again
        await settle(pilot)
        assert len(app.hits) == 2


@pytest.mark.anyio
async def test_empty_query_clears_results_and_says_why(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"moon")
        await settle(pilot)
        assert app.hits and app.hits[0].title == "Tides"
        await pilot.press(*["backspace"] * 4)
        await settle(pilot)
        assert app.hits == []
        assert "The query is empty" in status(app)


@pytest.mark.anyio
async def test_unknown_corpus_is_one_sentence_and_the_app_keeps_working(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="nope")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"coffee")
        await settle(pilot)
        assert "Corpus 'nope' does not exist" in status(app) or "nope" in status(app)
        assert app.query_one("#status").has_class("error")

        await pilot.press("ctrl+o")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("enter")  # kb, the only corpus
        await settle(pilot)
        assert app.corpus == "kb"
        assert app.hits[0].title == "Espresso"
        assert not app.query_one("#status").has_class("error")


@pytest.mark.anyio
async def test_configuration_switcher_and_help(populated_home: Path) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"yeast")
        await settle(pilot)
        await pilot.press("ctrl+g")
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("down", "down", "enter")  # hybrid → dense → sparse
        await settle(pilot)
        assert app.configuration == "sparse"
        assert app.hits[0].title == "Bread"
        assert "sparse" in status(app)
        # BM25 only: documents without the word do not match at all.
        assert len(app.hits) == 1

        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.anyio
async def test_remote_api_search_and_revoked_key(running_api: object) -> None:
    from typing import cast

    api = cast("RunningApiLike", running_api)
    app = FerretSearchApp(RemoteSearchClient(api.url, api_key=api.search_key), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"largest planet")
        await settle(pilot)
        assert app.hits[0].title == "Jupiter"
        assert api.url in status(app)

        with open_context() as context:
            revoke_api_key(context.session, "tui")
            context.session.commit()
        await pilot.press(*" gas")
        await settle(pilot)
        assert app.hits == []
        assert "The API refused the key (wrong or revoked)" in status(app)


@pytest.mark.anyio
async def test_unreachable_api_is_one_sentence(ferret_home: Path) -> None:
    from ferret_testing import free_port

    url = f"http://127.0.0.1:{free_port()}"
    app = FerretSearchApp(RemoteSearchClient(url, api_key="fk_x_y"), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"paris")
        await settle(pilot)
        assert f"Cannot reach the API at {url}" in status(app)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert f"Cannot reach the API at {url}" in status(app)  # no chooser without corpora, still running


class RunningApiLike:
    url: str
    search_key: str


@pytest.mark.anyio
async def test_configuration_switcher_offers_the_stored_search_configurations(populated_home: Path) -> None:
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.search_config import create_search_config
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.search.configuration import promote_config
    from ferret.core.search.fusion import Fusion

    with open_context() as context:
        base = ModelRegistry(context.session, context.settings).ensure_base()
        kb = get_corpus(context.session, "kb")
        create_search_config(context.session, kb, base, Fusion("convex", 1.0).to_json())
        # the second one is what search runs now: the chooser says so
        promote_config(context.session, context.settings, context.backend, kb,
                       create_search_config(context.session, kb, base, Fusion("convex", 0.9).to_json()))  # fmt: skip
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"yeast dough")
        await settle(pilot)
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        options = app.screen.query_one(OptionList)
        labels = [str(options.get_option_at_index(i).prompt)[2:] for i in range(options.option_count)]  # after "● "
        assert labels == ["hybrid", "dense", "sparse", "config base", "config 1", "config 2 (active)"]
        await pilot.press("down", "down", "down", "down", "enter")
        await settle(pilot)
        assert app.configuration == "config 1"
        assert "config 1" in status(app) and not app.query_one("#status").has_class("error")
        assert app.hits[0].title == "Bread"
        assert 0 < app.hits[0].score <= 1  # dense-only convex fusion: a cosine, not an RRF sum
        assert len(app.hits) > 1  # dense: documents without the words match too


def test_the_local_store_sees_what_ferret_search_sees(populated_home: Path, tmp_path: Path) -> None:
    """It searched every group, with no option and no word of it, where `ferret search` sees public documents only."""
    from ferret.connectors.filesystem.connector import FilesystemConnector
    from ferret.core.corpus.ingest import Ingestor
    from ferret.core.db.corpus import create_corpus
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.versioned_collection import VersionedCollection

    folder = tmp_path / "hr"
    folder.mkdir()
    (folder / "plan.md").write_text("# Restructuring\n\nConfidential: the restructuring plan closes two offices.")
    (folder / "calendar.md").write_text("# Calendar\n\nThe restructuring of the holiday calendar adds a day off.")
    with open_context() as context:
        corpus = create_corpus(context.session, "hr")
        connector = FilesystemConnector(root=str(folder), name="files", acl={"plan.md": ["hr"]})
        Ingestor(context.session, context.settings, context.backend, corpus).run(connector)
        versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
        versions.promote(versions.build(ModelRegistry(context.session, context.settings).ensure_base()))

    def seen(client: LocalSearchClient) -> tuple[str, set[str]]:
        try:
            hits = client.search("hr", "restructuring plan", configuration="hybrid")
            return client.target, {hit.external_id for hit in hits}
        finally:
            client.close()

    assert seen(LocalSearchClient()) == ("local store (public only)", {"calendar.md"})
    assert seen(LocalSearchClient(["hr"])) == ("local store (public + hr)", {"calendar.md", "plan.md"})
    assert seen(LocalSearchClient(all_groups=True)) == ("local store (all groups)", {"calendar.md", "plan.md"})
