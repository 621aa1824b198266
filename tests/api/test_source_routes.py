"""Sources over HTTP: add one after its access check, list a corpus's sources with their last sync report, sync one
now, read its reports; and an API key naming a user searches as the external groups a source reported that user in."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
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


def test_a_source_is_added_over_http_only_after_its_access_check(
    client: TestClient, auth: Auth, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = tmp_path / "kb.sqlite"
    with sqlite3.connect(kb) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, body TEXT)")
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    config: dict[str, Any] = {"url": {"env": "KB_URL"}, "table": "article", "text_columns": ["body"]}
    body: dict[str, Any] = {"name": "kb", "kind": "sql", "config": config}

    refused = client.post("/v1/corpora/intake/sources", json=body, headers=auth("admin"))
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == (
        "SQL source could not read columns body, id of table article at {env: KB_URL} (no such table: article); check "
        "table, db_schema and the column names; nothing was stored (check=false stores the source without this check)."
    )
    corpora = client.get("/v1/corpora", headers=auth("admin")).json()["corpora"]
    assert "intake" not in [corpus["name"] for corpus in corpora]  # not even the corpus was created

    unchecked = client.post("/v1/corpora/intake/sources?check=false", json=body, headers=auth("admin"))
    assert unchecked.status_code == 201, unchecked.text
    config["table"] = "articles"
    conflict = client.post("/v1/corpora/intake/sources", json=body, headers=auth("admin"))
    assert conflict.status_code == 409 and "send replace=true to change its definition" in conflict.text
    replaced = client.post("/v1/corpora/intake/sources?replace=true", json=body, headers=auth("admin"))
    assert replaced.status_code == 201 and replaced.json()["kind"] == "sql", replaced.text
    assert client.post("/v1/corpora/intake/sources", json=body, headers=auth("search-a")).status_code == 403
    plain = {**body, "name": "plain", "config": {**config, "url": "postgresql://u:hunter2@h/db"}}
    leaked = client.post("/v1/corpora/intake/sources", json=plain, headers=auth("admin"))
    assert leaked.status_code == 422 and "hunter2" not in leaked.text
