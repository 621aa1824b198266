"""``GET /v1/corpora/{corpus}/documents/{id}``: a search result's document, passages in order, within the caller's
groups; a document the caller may not read answers exactly as a missing one does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from ferret.core.db.engine import session_scope
from ferret.core.db.models import Document

Auth = Callable[[str], dict[str, str]]
SEARCH_KEYS = {"search-a": "a", "search-b": "b", "search-public": "public", "admin": "public"}


def document_ids(client: TestClient, auth: Auth) -> dict[str, int]:
    """external id -> document id of every document of corpus kb, found by an owner-less search per group."""
    ids: dict[str, int] = {}
    for key in ("search-a", "search-b"):
        body = {"query": "volcano", "k": 20, "mode": "sparse"}
        for hit in client.post("/v1/corpora/kb/search", json=body, headers=auth(key)).json()["results"]:
            ids[hit["external_id"]] = hit["document_id"]
    assert len(ids) == 6
    return ids


def not_found_sentence(response_detail: str, document_id: int) -> str:
    return response_detail.replace(str(document_id), "<id>")


@pytest.mark.parametrize(("key", "group"), SEARCH_KEYS.items())
def test_a_caller_reads_exactly_the_documents_it_can_search(
    client: TestClient, auth: Auth, visible: dict[str, set[str]], key: str, group: str
) -> None:
    ids = document_ids(client, auth)
    missing = client.get(f"/v1/corpora/kb/documents/{10**9}", headers=auth(key))
    assert missing.status_code == 404
    for external_id, document_id in ids.items():
        response = client.get(f"/v1/corpora/kb/documents/{document_id}", headers=auth(key))
        if external_id in visible[group]:
            assert response.status_code == 200, response.text
            assert response.json()["external_id"] == external_id
        else:
            # Admin keys included: the same status and sentence as an id that does not exist.
            assert response.status_code == 404, (key, external_id)
            assert not_found_sentence(response.json()["detail"], document_id) == not_found_sentence(
                missing.json()["detail"], 10**9
            )


def test_the_document_body_passages_metadata_and_groups(client: TestClient, auth: Auth) -> None:
    body = {"query": "joint hazard report", "k": 1, "mode": "sparse"}
    hit = client.post("/v1/corpora/kb/search", json=body, headers=auth("search-a")).json()["results"][0]
    response = client.get(f"/v1/corpora/kb/documents/{hit['document_id']}", headers=auth("search-a"))
    document = response.json()
    assert document["external_id"] == "ab-1" and document["source"] == "push"
    assert document["metadata"] == {"team": "geo"} and document["corpus"] == "kb"
    assert document["acl_groups"] == ["a"]  # the caller's groups that grant it, never the others ("b")
    assert [p["id"] for p in document["passages"]] == [hit["passage_id"]]
    assert document["passages"][0]["text"] == hit["text"] and document["passages"][0]["ordinal"] == 0
    assert document["updated_at"].endswith(("Z", "+00:00"))


def test_a_long_document_comes_back_as_its_passages_in_order(client: TestClient, auth: Auth, installation: Any) -> None:
    created = client.post(
        "/v1/corpora",
        json={"name": "doc-route", "max_passage_tokens": 32, "passage_overlap_tokens": 0},
        headers=auth("admin"),
    )
    assert created.status_code == 201, created.text
    sentences = [f"Paragraph {n} of the survey describes crater number {n} in detail." for n in range(12)]
    pushed = {"documents": [{"external_id": "long", "text": " ".join(sentences), "acl_groups": ["a"]}]}
    response = client.post("/v1/corpora/doc-route/documents", json=pushed, headers=auth("ingest-a"))
    assert response.status_code == 200 and response.json()["passages_added"] > 3, response.text

    # The corpus has no index version to search, and the route needs none: it reads the database.
    with session_scope(installation.settings.database_url) as session:
        found = session.scalars(select(Document.id).where(Document.external_id == "long")).one()
    document = client.get(f"/v1/corpora/doc-route/documents/{found}", headers=auth("search-a")).json()
    ordinals = [p["ordinal"] for p in document["passages"]]
    assert ordinals == list(range(len(ordinals))) and len(ordinals) > 3
    joined = " ".join(p["text"] for p in document["passages"])
    for sentence in (sentences[0], sentences[6], sentences[-1]):
        assert sentence.split(" describes")[0] in joined
    assert client.get(f"/v1/corpora/doc-route/documents/{found}", headers=auth("search-b")).status_code == 404
    assert client.get(f"/v1/corpora/kb/documents/{found}", headers=auth("search-a")).status_code == 404


@pytest.mark.parametrize(
    ("path", "key", "status"),
    [
        ("/v1/corpora/kb/documents/1", None, 401),
        ("/v1/corpora/kb/documents/1", "ingest-a", 403),
        ("/v1/corpora/nowhere/documents/1", "search-a", 404),
        ("/v1/corpora/kb/documents/0", "search-a", 422),
        ("/v1/corpora/kb/documents/abc", "search-a", 422),
        (f"/v1/corpora/kb/documents/{2**63}", "search-a", 422),
    ],
)
def test_bad_requests_get_their_status_and_one_sentence(
    client: TestClient, auth: Auth, path: str, key: str | None, status: int
) -> None:
    response = client.get(path, headers=auth(key) if key else {})
    assert response.status_code == status
    assert response.json()["detail"].endswith(".")
