"""The terminal client against the real HTTP API (uvicorn on 127.0.0.1, conftest's ``running_api``): the document
view read through the document route (the hit among its neighbours, the metadata) and the configuration switcher
offering the corpus's stored search configurations to an admin key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("textual", reason="the terminal client needs the ui extra: pip install -e '.[ui]'")

from textual.widgets import OptionList

from ferret.core.db.api_key import create_api_key
from ferret.core.db.document import delete_documents
from ferret.ui.runtime import open_context
from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.screens import ChoiceScreen, DocumentScreen
from ferret.ui.tui.search_client import RemoteSearchClient
from ui.tui_pilot import SIZE, settle, status

TOPICS = ["harbour", "lighthouse", "orchard", "quarry", "monastery", "vineyard", "windmill", "foundry", "canal"]


def new_key(name: str, scopes: list[str]) -> str:
    with open_context() as context:
        _, key = create_api_key(context.session, name, scopes, [])
        context.session.commit()
    return key


def choices(app: FerretSearchApp) -> list[str]:
    options = app.screen.query_one(OptionList)
    return [str(options.get_option_at_index(i).prompt)[2:] for i in range(options.option_count)]  # after "● "


@pytest.mark.anyio
async def test_remote_document_view_shows_the_hit_among_its_neighbours(running_api: Any) -> None:
    # A long public document pushed through the API: a few passages per topic.
    paragraphs = [
        f"Chapter {n}: the old {topic}. " + f"The {topic} stood there. " * 40 for n, topic in enumerate(TOPICS)
    ]
    document: dict[str, Any] = {"external_id": "valley.md", "title": "Valley", "text": "\n\n".join(paragraphs)}
    document["metadata"] = {"url": "https://wiki.example/valley"}
    headers = {"Authorization": f"Bearer {new_key('pusher', ['ingest'])}"}
    url = f"{running_api.url}/v1/corpora/kb/documents"
    answer = httpx.post(url, json={"documents": [document]}, headers=headers, timeout=180)  # embeds on a busy CPU
    assert answer.status_code == 200 and answer.json()["passages_added"] >= 7, answer.text

    app = FerretSearchApp(RemoteSearchClient(running_api.url, api_key=running_api.search_key), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"monastery")
        await settle(pilot)
        assert app.hits[0].title == "Valley", status(app)
        await pilot.press("down", "enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DocumentScreen), status(app)
        view, hit = screen.view, app.hits[0]
        assert "monastery" in view.passages[view.hit_position]
        assert view.hit_position == 2 and len(view.passages) == 5  # two neighbours on each side
        stored = httpx.get(
            f"{running_api.url}/v1/corpora/kb/documents/{hit.document_id}",
            headers={"Authorization": f"Bearer {running_api.search_key}"},
        ).json()["passages"]
        position = [p["id"] for p in stored].index(hit.passage_id)
        assert list(view.passages) == [p["text"] for p in stored[position - 2 : position + 3]]
        details = dict(view.details)
        assert details["groups"] == "public" and details["api"] == running_api.url
        assert details["link"] == "https://wiki.example/valley"
        assert details["passage"] == f"{position + 1} of {len(stored)}"


@pytest.mark.anyio
async def test_remote_switcher_offers_stored_configurations_to_an_admin_key(running_api: Any) -> None:
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.search_config import create_search_config
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.search.configuration import promote_config
    from ferret.core.search.fusion import Fusion

    with open_context() as context:
        base = ModelRegistry(context.session, context.settings).ensure_base()
        kb = get_corpus(context.session, "kb")
        create_search_config(context.session, kb, base, Fusion("convex", 1.0).to_json())
        promote_config(context.session, context.settings, context.backend, kb,
                       create_search_config(context.session, kb, base, Fusion("convex", 0.9).to_json()))  # fmt: skip

    # A search key: the modes only, and the status line says why.
    app = FerretSearchApp(RemoteSearchClient(running_api.url, api_key=running_api.search_key), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert choices(app) == ["hybrid", "dense", "sparse"]
        assert "admin keys only" in status(app)

    admin = RemoteSearchClient(running_api.url, api_key=new_key("tui-admin", ["admin"]))
    app = FerretSearchApp(admin, corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"yeast dough")
        await settle(pilot)
        assert app.hits[0].title == "Bread"
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert choices(app) == ["hybrid", "dense", "sparse", "config base", "config 1", "config 2 (active)"]
        await pilot.press("down", "down", "down", "down", "enter")
        await settle(pilot)
        assert app.configuration == "config 1"
        assert not app.query_one("#status").has_class("error"), status(app)
        assert app.hits[0].title == "Bread"
        assert 0 < app.hits[0].score <= 1  # dense-only convex fusion: a cosine, not an RRF sum
        assert len(app.hits) > 1  # dense: documents without the words match too


@pytest.mark.anyio
async def test_remote_document_gone_is_one_sentence(running_api: Any, populated_home: Path) -> None:
    app = FerretSearchApp(RemoteSearchClient(running_api.url, api_key=running_api.search_key), corpus="kb")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"espresso")
        await settle(pilot)
        hit = app.hits[0]
        with open_context() as context:  # removed between the search and the click (a sync ran meanwhile)
            delete_documents(context.session, [hit.document_id])
        await pilot.press("down", "enter")
        await settle(pilot)
        assert not isinstance(app.screen, DocumentScreen)
        assert f"Document {hit.external_id!r} is no longer in corpus 'kb' (or this key may not read it)." in status(app)
        assert app.query_one("#status").has_class("error")
