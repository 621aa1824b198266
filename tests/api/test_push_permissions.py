"""Issue 11 item 3 through the push API: permissions compared on their own (grants and revocations are applied even
under the same ``version``, without re-embedding), and a push older than the stored ``updated_at`` is ignored and
counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ferret.core.db.corpus import get_corpus
from ferret.core.db.models import Document, Passage

Auth = Callable[[str], dict[str, str]]
DOC: dict[str, Any] = {
    "external_id": "perm-1",
    "text": "Permafrost thaws along the tundra coast every summer.",
    "acl_groups": ["a"],
    "version": "1",
    "updated_at": "2026-11-01T10:00:00Z",
}
QUERY = "permafrost thaw tundra coast"


def push(client: TestClient, auth: Auth, document: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/corpora/live/documents", json={"documents": [document]}, headers=auth("ingest-a"))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def found(client: TestClient, auth: Auth, key: str) -> bool:
    response = client.post("/v1/corpora/live/search", json={"query": QUERY, "k": 5}, headers=auth(key))
    assert response.status_code == 200, response.text
    return "perm-1" in {hit["external_id"] for hit in response.json()["results"]}


def passage_ids(client: TestClient) -> list[int]:
    ferret = client.app.state.ferret  # type: ignore[attr-defined]
    with ferret.sessions() as session:
        corpus = get_corpus(session, "live")
        return list(
            session.scalars(
                select(Passage.id)
                .join(Document)
                .where(Document.corpus_id == corpus.id, Document.external_id == "perm-1")
            )
        )


@pytest.fixture
def stored(client: TestClient, auth: Auth) -> Iterator[None]:
    assert push(client, auth, DOC)["added"] == 1
    yield
    client.post("/v1/corpora/live/documents/delete", json={"external_ids": ["perm-1"]}, headers=auth("ingest-a"))


def test_a_revocation_under_the_same_version_is_applied_without_re_embedding(
    client: TestClient, auth: Auth, stored: None
) -> None:
    before = passage_ids(client)
    assert found(client, auth, "search-a") and not found(client, auth, "search-b")

    report = push(client, auth, {**DOC, "acl_groups": ["b"], "updated_at": "2026-11-02T10:00:00Z"})

    assert (report["permissions_updated"], report["unchanged"], report["passages_added"]) == (1, 0, 0)
    assert passage_ids(client) == before  # same passages: nothing re-chunked or re-embedded
    assert not found(client, auth, "search-a")  # the revocation reached the payload of every live version
    assert found(client, auth, "search-b")


def test_an_older_push_is_ignored_and_counted(client: TestClient, auth: Auth, stored: None) -> None:
    report = push(client, auth, {**DOC, "text": "An old draft.", "version": "0", "updated_at": "2026-10-01T00:00:00Z"})

    assert (report["stale"], report["updated"], report["permissions_updated"]) == (1, 0, 0)
    ferret = client.app.state.ferret  # type: ignore[attr-defined]
    with ferret.sessions() as session:
        body = session.scalar(select(Document.body).where(Document.external_id == "perm-1"))
        assert body == DOC["text"]
        assert session.scalar(select(func.count(Document.id)).where(Document.external_id == "perm-1")) == 1
