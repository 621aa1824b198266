"""Fixtures of the HTTP API tests: a real FERRET_HOME (SQLite + embedded Qdrant Edge) with a tiny corpus in groups
a, b and public, built and promoted; API keys of every kind; and the FastAPI app with its lifespan running.

Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ferret.api.app import create_app
from ferret.core.corpus.push import PushedDocument, PushIngestor
from ferret.core.db.api_key import create_api_key, revoke_api_key
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.migrate import upgrade
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.documents import Document as SourceDocument

# Every document mentions a volcano, so any search for one would return them all without the access filter.
ACL_DOCUMENTS: list[dict[str, Any]] = [
    {"external_id": "pub-1", "text": "Volcanoes erupt magma, ash and gas.", "acl_groups": ["public"], "team": "geo"},
    {"external_id": "pub-2", "text": "The volcano museum opens at nine.", "acl_groups": ["public"], "team": "ops"},
    {"external_id": "a-1", "text": "Alpha team volcano budget for next year.", "acl_groups": ["a"], "team": "geo"},
    {"external_id": "a-2", "text": "Alpha salaries of the volcano survey crew.", "acl_groups": ["a"], "team": "ops"},
    {"external_id": "b-1", "text": "Beta team volcano drilling contract terms.", "acl_groups": ["b"], "team": "geo"},
    {"external_id": "ab-1", "text": "Joint alpha beta volcano hazard report.", "acl_groups": ["a", "b"], "team": "geo"},
]
VISIBLE: dict[str, set[str]] = {
    "public": {"pub-1", "pub-2"},
    "a": {"pub-1", "pub-2", "a-1", "a-2", "ab-1"},
    "b": {"pub-1", "pub-2", "b-1", "ab-1"},
}
LIMITS = {"api_max_body_bytes": 64_000, "api_max_batch_documents": 20}


@dataclass
class Installation:
    settings: FerretSettings
    keys: dict[str, str] = field(default_factory=dict)


def push(
    settings: FerretSettings, backend: EdgeIndexBackend, corpus_name: str, documents: list[dict[str, Any]]
) -> None:
    with session_scope(settings.database_url) as session:
        corpus = create_corpus(session, corpus_name, max_passage_tokens=64, passage_overlap_tokens=8)
        pushed = [
            PushedDocument(
                SourceDocument(
                    external_id=d["external_id"],
                    title=d.get("title", ""),
                    text=d["text"],
                    acl_groups=d.get("acl_groups", ["public"]),
                    metadata={"team": d["team"]} if "team" in d else {},
                ),
                version="1",
            )
            for d in documents
        ]
        PushIngestor(session, settings, backend, corpus).push("push", pushed)


def build(settings: FerretSettings, backend: EdgeIndexBackend, corpus_name: str, *, versions: int = 1) -> None:
    from ferret.core.db.corpus import get_corpus

    with session_scope(settings.database_url) as session:
        corpus = get_corpus(session, corpus_name)
        collection = VersionedCollection(session, settings, backend, corpus)
        model = ModelRegistry(session, settings).ensure_base()
        for _ in range(versions):
            collection.promote(collection.build(model))


def install(home: Path) -> Installation:
    """Corpus ``kb`` (the ACL documents, one index version), corpus ``live`` (two versions, for pushes and
    promote/rollback), corpus ``empty`` (no index), and keys: admin, admin-a, owner, search-a, search-b,
    search-public, ingest-a, search-ingest and a revoked one."""
    settings = FerretSettings(home=home, **LIMITS)  # type: ignore[arg-type]
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        push(settings, backend, "kb", ACL_DOCUMENTS)
        build(settings, backend, "kb")
        push(settings, backend, "live", [{"external_id": "seed", "text": "Glaciers carve fjords over millennia."}])
        build(settings, backend, "live", versions=2)
        with session_scope(settings.database_url) as session:
            create_corpus(session, "empty")
    finally:
        backend.close()
    installation = Installation(settings)
    with session_scope(settings.database_url) as session:
        for name, scopes, groups in (
            ("admin", ["admin"], []),
            ("admin-a", ["admin"], ["a"]),
            ("owner", ["owner"], []),
            ("search-a", ["search"], ["a"]),
            ("search-b", ["search"], ["b"]),
            ("search-public", ["search"], []),
            ("ingest-a", ["ingest"], ["a"]),
            ("search-ingest", ["search", "ingest"], []),
            ("revoked", ["admin"], ["a", "b"]),
        ):
            installation.keys[name] = create_api_key(session, name, scopes, groups)[1]
        revoke_api_key(session, "revoked")
    return installation


@pytest.fixture(scope="session")
def make_installation() -> Callable[[Path], Installation]:
    return install


@pytest.fixture(scope="session")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    return install(tmp_path_factory.mktemp("api-home"))


@pytest.fixture(scope="session")
def client(installation: Installation) -> Iterator[TestClient]:
    """The app with its lifespan running (one backend, one session factory) for the whole session."""
    with TestClient(create_app(installation.settings)) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def auth(installation: Installation) -> Callable[[str], dict[str, str]]:
    """``auth("search-a")``: the headers of that key."""

    def headers(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {installation.keys[name]}"}

    return headers


@pytest.fixture(scope="session")
def visible() -> dict[str, set[str]]:
    return VISIBLE
