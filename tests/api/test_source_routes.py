"""Sources over HTTP: list a corpus's sources with their last sync report, sync one now, read its reports; and an API
key naming a user searches as the external groups a source reported that user in."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from ferret.core.db.api_key import create_api_key
from ferret.core.db.corpus import get_corpus
from ferret.core.db.source import replace_group_members
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.sources.config import parse_spec
from ferret.core.sources.service import add_source

Auth = Callable[[str], dict[str, str]]


def test_sources_are_listed_synced_and_their_groups_resolve_for_keys(
    client: TestClient, auth: Auth, tmp_path: Path
) -> None:
    kb = tmp_path / "kb.sqlite"
    with sqlite3.connect(kb) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, body TEXT, teams TEXT)")
        connection.executemany(
            "INSERT INTO articles VALUES (?, ?, ?)",
            [(1, "Refunds reach the card within five working days.", "support"), (2, "Lunch is served at noon.", "")],
        )
    runtime = client.app.state.ferret  # type: ignore[attr-defined]
    with runtime.sessions() as session:
        spec = {
            "corpus": "helpdesk",
            "name": "kb",
            "kind": "sql",
            "config": {"url": f"sqlite:///{kb}", "table": "articles", "text_columns": ["body"], "acl_column": "teams"},
        }
        source = add_source(session, parse_spec(spec), runtime.connectors)
        replace_group_members(session, source, [("kb:group:support", "user:ann@x.org")])
        keys = {name: create_api_key(session, name, ["search"], [f"user:{name}@x.org"])[1] for name in ("ann", "bob")}
        session.commit()

    synced = client.post("/v1/corpora/helpdesk/sources/kb/sync", headers=auth("admin"))
    assert synced.status_code == 200, synced.text
    assert (synced.json()["state"], synced.json()["counts"]["new"]) == ("succeeded", 2)
    assert client.post("/v1/corpora/helpdesk/sources/kb/sync", headers=auth("search-a")).status_code == 403

    listed = client.get("/v1/corpora/helpdesk/sources", headers=auth("admin")).json()["sources"]
    assert [(s["name"], s["kind"], s["last_sync"]["counts"]["new"]) for s in listed] == [("kb", "sql", 2)]
    reports = client.get("/v1/corpora/helpdesk/sources/kb/syncs", headers=auth("admin")).json()
    assert len(reports) == 1 and reports[0]["duration_s"] is not None

    with runtime.sessions() as session:
        versions = VersionedCollection(session, runtime.settings, runtime.backend, get_corpus(session, "helpdesk"))
        versions.promote(versions.build(ModelRegistry(session, runtime.settings).ensure_base()))

    def found(key: str) -> set[str]:
        body = {"query": "refunds card working days", "k": 5}
        response = client.post("/v1/corpora/helpdesk/search", json=body, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        return {hit["external_id"] for hit in response.json()["results"]}

    assert "1" in found(keys["ann"])  # Ann is in kb:group:support, as the source reported
    assert "1" not in found(keys["bob"])
