"""Search over HTTP: access control inside Qdrant's query for every key, mode and filter; bad keys and scopes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from fastapi.testclient import TestClient

MODES = ("dense", "sparse", "hybrid")
Auth = Callable[[str], dict[str, str]]


def found(client: TestClient, headers: dict[str, str], body: Mapping[str, object], corpus: str = "kb") -> set[str]:
    response = client.post(f"/v1/corpora/{corpus}/search", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return {hit["external_id"] for hit in response.json()["results"]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("key", "groups"),
    [("search-a", "a"), ("search-b", "b"), ("search-public", "public"), ("admin", "public")],
)
def test_a_caller_sees_exactly_its_groups_and_public(
    client: TestClient, auth: Auth, visible: dict[str, set[str]], key: str, groups: str, mode: str
) -> None:
    # Admin keys get no exemption: the admin key has no groups, so it sees only public documents.
    assert found(client, auth(key), {"query": "volcano", "k": 20, "mode": mode}) == visible[groups]


@pytest.mark.parametrize("mode", MODES)
def test_filters_narrow_but_never_widen_access(
    client: TestClient, auth: Auth, visible: dict[str, set[str]], mode: str
) -> None:
    headers = auth("search-b")
    # Naming a document of another group finds nothing of it.
    forbidden = {"query": "volcano", "mode": mode, "filters": {"external_id": ["a-1", "a-2", "b-1"]}}
    assert found(client, headers, forbidden) == {"b-1"}
    team = {"query": "volcano", "k": 20, "mode": mode, "filters": {"metadata": {"team": "geo"}}}
    assert found(client, headers, team) == {"pub-1", "b-1", "ab-1"}
    teams = {"query": "volcano", "k": 20, "mode": mode, "filters": {"metadata": {"team": ["geo", "ops"]}}}
    assert found(client, headers, teams) == visible["b"]
    assert found(client, headers, {"query": "volcano", "mode": mode, "filters": {"source": ["other"]}}) == set()
    assert (
        found(client, headers, {"query": "volcano", "k": 20, "mode": mode, "filters": {"source": ["push"]}})
        == (visible["b"])
    )


def test_search_response_shape_and_k(client: TestClient, auth: Auth) -> None:
    response = client.post("/v1/corpora/kb/search", json={"query": "magma and ash", "k": 1}, headers=auth("search-a"))
    body = response.json()
    assert response.status_code == 200
    assert body["corpus"] == "kb" and body["mode"] == "hybrid" and len(body["results"]) == 1
    hit = body["results"][0]
    assert hit["external_id"] == "pub-1" and hit["source"] == "push" and hit["metadata"] == {"team": "geo"}
    assert "magma" in hit["text"] and body["took_ms"] > 0
    assert hit["snippet"] == "Volcanoes erupt magma, ash and gas."
    assert [hit["snippet"][start:end] for start, end in hit["highlights"]] == ["magma", "ash"]


def test_pages_of_results_follow_each_other(client: TestClient, auth: Auth) -> None:
    """``offset`` skips the first results: pages of two are the slices of one search for all five a key reads."""

    def ids(**page: int) -> list[str]:
        body = {"query": "volcano team", **page}
        response = client.post("/v1/corpora/kb/search", json=body, headers=auth("search-a"))
        assert response.status_code == 200, response.text
        return [hit["external_id"] for hit in response.json()["results"]]

    whole = ids(k=10)
    assert len(whole) == 5
    assert ids(k=2) + ids(k=2, offset=2) + ids(k=2, offset=4) == whole
    assert ids(k=2, offset=5) == []


def test_both_key_headers_work(client: TestClient, installation: object) -> None:
    key = installation.keys["search-a"]  # type: ignore[attr-defined]
    for headers in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}):
        assert client.post("/v1/corpora/kb/search", json={"query": "volcano"}, headers=headers).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-key"},
        {"X-API-Key": "fk_00000000_unknownsecret"},
    ],
)
def test_missing_or_unknown_key_is_401(client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/v1/corpora/kb/search", json={"query": "volcano"}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["detail"].endswith(".")


def test_revoked_key_is_401(client: TestClient, auth: Auth) -> None:
    response = client.post("/v1/corpora/kb/search", json={"query": "volcano"}, headers=auth("revoked"))
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


@pytest.mark.parametrize(
    ("key", "method", "path", "body"),
    [
        ("ingest-a", "POST", "/v1/corpora/kb/search", {"query": "volcano"}),
        ("search-a", "POST", "/v1/corpora/kb/documents", {"documents": []}),
        ("search-a", "POST", "/v1/corpora/kb/documents/delete", {"external_ids": ["a-1"]}),
        ("search-a", "POST", "/v1/corpora", {"name": "nope"}),
        ("ingest-a", "GET", "/v1/tasks", None),
        ("search-ingest", "GET", "/v1/jobs", None),
        ("search-a", "GET", "/v1/corpora/kb/index-versions", None),
        ("search-a", "POST", "/v1/corpora/kb/index-versions/rollback", None),
    ],
)
def test_missing_scope_is_403(
    client: TestClient, auth: Auth, key: str, method: str, path: str, body: dict[str, object] | None
) -> None:
    response = client.request(method, path, json=body, headers=auth(key))
    assert response.status_code == 403
    assert "scope" in response.json()["detail"]


def test_unknown_corpus_is_404_and_unindexed_is_409(client: TestClient, auth: Auth) -> None:
    response = client.post("/v1/corpora/nowhere/search", json={"query": "volcano"}, headers=auth("search-a"))
    assert response.status_code == 404
    assert response.json()["detail"] == "Corpus 'nowhere' does not exist; create it with POST /v1/corpora."
    response = client.post("/v1/corpora/empty/search", json={"query": "volcano"}, headers=auth("search-a"))
    assert response.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"query": "volcano", "k": 0},
        {"query": "volcano", "k": 101},
        {"query": "volcano", "offset": -1},
        {"query": "volcano", "offset": 101},
        {"query": ""},
        {"query": "   "},
        {"query": "x" * 2001},
        {"query": "volcano", "mode": "fuzzy"},
        {"query": "volcano", "limit": 3},
        {"query": "vol\x00cano"},
        {"query": "volcano", "filters": {"metadata": {"team.name": "geo"}}},
        {"query": "volcano", "filters": {"metadata": {"team": []}}},
        {"query": "volcano", "filters": {"metadata": {"team": 2**70}}},
        {"query": "volcano", "filters": {"acl_groups": ["a"]}},
    ],
)
def test_bad_search_is_422_with_one_sentence(client: TestClient, auth: Auth, body: dict[str, object]) -> None:
    response = client.post("/v1/corpora/kb/search", json=body, headers=auth("search-b"))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail.endswith(".") and "\n" not in detail


def test_malformed_json_is_422(client: TestClient, auth: Auth) -> None:
    response = client.post(
        "/v1/corpora/kb/search",
        content=b'{"query": ',
        headers={**auth("search-a"), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    # the location was a character offset read as a field name: "not valid at 'body.10': JSON decode error"
    assert response.json()["detail"] == "The request body is not valid JSON at character 10; send a JSON object."
    untyped = client.post("/v1/corpora/kb/search", content=b'{"query": "x"}', headers=auth("search-a"))
    assert untyped.status_code == 422
    assert untyped.json()["detail"] == (
        "The request body must be a JSON object, sent with 'Content-Type: application/json'."
    )


def test_health_needs_no_key(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok" and response.json()["database"] == "ok"
