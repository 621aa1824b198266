"""The connector push API: idempotent batch upserts and deletes, applied to the database and every live index
version; body and batch limits (413)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import live_index_versions
from ferret.core.db.models import Document, Passage

Auth = Callable[[str], dict[str, str]]
BATCH: list[dict[str, Any]] = [
    {"external_id": "p-1", "title": "Fjords", "text": "Fjords are drowned glacial valleys.", "version": "1"},
    {"external_id": "p-2", "text": "Moraines mark where a glacier stopped.", "acl_groups": ["a"], "version": "1"},
    {"external_id": "p-3", "text": "Icebergs calve from tidewater glaciers.", "metadata": {"lang": "en"}},
]


def state(client: TestClient) -> dict[str, Any]:
    """Documents, passages and the point count of every live index version of corpus ``live``."""
    ferret = client.app.state.ferret  # type: ignore[attr-defined]
    with ferret.sessions() as session:
        corpus = get_corpus(session, "live")
        documents = session.scalar(select(func.count(Document.id)).where(Document.corpus_id == corpus.id))
        passages = session.scalar(select(func.count(Passage.id)).where(Passage.corpus_id == corpus.id))
        versions = {v.collection: ferret.backend.count(v.collection) for v in live_index_versions(session, corpus)}
        stored = {
            external_id: version
            for external_id, version in session.execute(
                select(Document.external_id, Document.version).where(Document.corpus_id == corpus.id)
            )
        }
    return {"documents": documents, "passages": passages, "points": versions, "versions": stored}


@pytest.fixture
def pushed(client: TestClient, auth: Auth) -> Iterator[None]:
    """BATCH pushed into ``live``; removed again afterwards."""
    response = client.post("/v1/corpora/live/documents", json={"documents": BATCH}, headers=auth("ingest-a"))
    assert response.status_code == 200, response.text
    yield
    ids = [d["external_id"] for d in BATCH] + ["p-4"]
    client.post("/v1/corpora/live/documents/delete", json={"external_ids": ids}, headers=auth("ingest-a"))


def search_ids(client: TestClient, auth: Auth, key: str, query: str) -> set[str]:
    response = client.post("/v1/corpora/live/search", json={"query": query, "k": 20}, headers=auth(key))
    assert response.status_code == 200, response.text
    return {hit["external_id"] for hit in response.json()["results"]}


def test_push_reaches_every_live_version_and_is_searchable(client: TestClient, auth: Auth, pushed: None) -> None:
    now = state(client)
    assert now["documents"] == 4 and len(now["points"]) == 2
    assert set(now["points"].values()) == {now["passages"]}
    assert now["versions"] == {"seed": "1", "p-1": "1", "p-2": "1", "p-3": None}
    assert "p-1" in search_ids(client, auth, "search-a", "drowned glacial valleys")
    # p-2 is shared with group a only.
    assert "p-2" in search_ids(client, auth, "search-a", "where a glacier stopped")
    assert "p-2" not in search_ids(client, auth, "search-b", "where a glacier stopped")


def test_the_same_batch_twice_changes_nothing(client: TestClient, auth: Auth, pushed: None) -> None:
    before = state(client)
    response = client.post("/v1/corpora/live/documents", json={"documents": BATCH}, headers=auth("search-ingest"))
    assert response.json() == {
        "added": 0,
        "updated": 0,
        "unchanged": 3,
        "deleted": 0,
        "passages_added": 0,
        "passages_deleted": 0,
        "permissions_updated": 0,
        "stale": 0,
        "skipped": [],
    }
    assert state(client) == before


def test_a_stored_version_is_skipped_and_a_new_one_replaces(client: TestClient, auth: Auth, pushed: None) -> None:
    headers = auth("ingest-a")
    same_version = [{**BATCH[0], "text": "Changed text, same version: ignored."}]
    report = client.post("/v1/corpora/live/documents", json={"documents": same_version}, headers=headers).json()
    assert report["unchanged"] == 1
    new_version = [{**BATCH[0], "text": "Fjords are long narrow sea inlets.", "version": "2"}]
    report = client.post("/v1/corpora/live/documents", json={"documents": new_version}, headers=headers).json()
    assert (report["updated"], report["passages_added"], report["passages_deleted"]) == (1, 1, 1)
    # Same content under a new version: nothing re-embedded, the version remembered.
    renamed = [{**BATCH[1], "version": "9"}]
    report = client.post("/v1/corpora/live/documents", json={"documents": renamed}, headers=headers).json()
    assert report["unchanged"] == 1 and report["passages_added"] == 0
    now = state(client)
    assert now["versions"]["p-1"] == "2" and now["versions"]["p-2"] == "9"
    assert set(now["points"].values()) == {now["passages"]} and now["documents"] == 4
    assert "p-1" in search_ids(client, auth, "search-a", "narrow sea inlets")


def test_delete_removes_everywhere_and_is_idempotent(client: TestClient, auth: Auth, pushed: None) -> None:
    body = {"external_ids": ["p-1", "p-3", "never-pushed"]}
    report = client.post("/v1/corpora/live/documents/delete", json=body, headers=auth("ingest-a")).json()
    assert report["deleted"] == 2 and report["passages_deleted"] == 2
    now = state(client)
    assert now["documents"] == 2 and set(now["points"].values()) == {now["passages"]}
    assert "p-1" not in search_ids(client, auth, "search-a", "drowned glacial valleys")
    again = client.post("/v1/corpora/live/documents/delete", json=body, headers=auth("ingest-a")).json()
    assert again["deleted"] == 0 and state(client) == now


def test_duplicates_and_empty_documents_are_reported(client: TestClient, auth: Auth, pushed: None) -> None:
    documents = [{"external_id": "p-4", "text": "first"}, {"external_id": "p-4", "text": "second"}]
    documents.append({"external_id": "p-5", "text": "   "})
    report = client.post("/v1/corpora/live/documents", json={"documents": documents}, headers=auth("ingest-a")).json()
    assert report["added"] == 1
    assert report["skipped"] == [
        {"external_id": "p-4", "reason": "duplicate id; first one kept"},
        {"external_id": "p-5", "reason": "empty document"},
    ]


def test_push_into_an_unknown_corpus_is_404(client: TestClient, auth: Auth) -> None:
    response = client.post("/v1/corpora/nowhere/documents", json={"documents": BATCH}, headers=auth("ingest-a"))
    assert response.status_code == 404


def test_a_source_of_another_kind_is_409(client: TestClient, auth: Auth, installation: Any) -> None:
    from ferret.core.db.corpus import get_or_create_source
    from ferret.core.db.engine import session_scope

    with session_scope(installation.settings.database_url) as session:
        get_or_create_source(session, get_corpus(session, "live"), "files", "filesystem", {})
    body = {"source": "files", "documents": BATCH}
    response = client.post("/v1/corpora/live/documents", json=body, headers=auth("ingest-a"))
    assert response.status_code == 409


@pytest.mark.parametrize(
    "document",
    [
        {"text": "no id"},
        {"external_id": "", "text": "empty id"},
        {"external_id": "x", "text": "no groups", "acl_groups": []},
        {"external_id": "x", "text": "nul \x00 char"},
        {"external_id": "x", "text": "big", "metadata": {"n": 2**64}},
        {"external_id": "x", "text": "odd field", "colour": "red"},
    ],
)
def test_bad_documents_are_422(client: TestClient, auth: Auth, document: dict[str, Any]) -> None:
    response = client.post("/v1/corpora/live/documents", json={"documents": [document]}, headers=auth("ingest-a"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"].endswith(".")


def test_oversized_bodies_and_batches_are_413(client: TestClient, auth: Auth, installation: Any) -> None:
    limit = installation.settings.api_max_body_bytes
    big = {"documents": [{"external_id": "big", "text": "x" * limit}]}
    response = client.post("/v1/corpora/live/documents", json=big, headers=auth("ingest-a"))
    assert response.status_code == 413
    assert f"{limit:,} bytes" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"documents": [{"external_id": "big", "text": "'
        for _ in range(limit // 1000 + 1):
            yield b"x" * 1000
        yield b'"}]}'

    headers = {**auth("ingest-a"), "Content-Type": "application/json"}
    response = client.post("/v1/corpora/live/documents", content=chunks(), headers=headers)
    assert response.status_code == 413

    too_many = {"documents": [{"external_id": f"n{i}", "text": "t"} for i in range(21)]}
    response = client.post("/v1/corpora/live/documents", json=too_many, headers=auth("ingest-a"))
    assert response.status_code == 413
    assert "limit of 20" in response.json()["detail"]
    response = client.post(
        "/v1/corpora/live/documents/delete",
        json={"external_ids": [str(i) for i in range(21)]},
        headers=auth("ingest-a"),
    )
    assert response.status_code == 413
    assert state(client)["documents"] == 1


def test_a_bad_content_length_is_400(client: TestClient, auth: Auth) -> None:
    headers = {**auth("ingest-a"), "Content-Type": "application/json", "Content-Length": "lots"}
    response = client.post("/v1/corpora/live/documents", content=b"{}", headers=headers)
    assert response.status_code == 400
