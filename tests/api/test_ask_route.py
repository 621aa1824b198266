"""``POST /v1/corpora/{corpus}/ask``: answers cite only passages the key may read, with retrieval probabilities
that sum to one; no reader, an unknown reader, a path for a name and a missing scope each get one sentence.

The reader here is untrained (a new start/end head on MiniLM): what is tested is the route, the access filter and
the provenance, not the answer's quality (``tests/cli/test_ask.py`` trains one)."""

from __future__ import annotations

import math
from collections.abc import Callable

from fastapi.testclient import TestClient

Auth = Callable[[str], dict[str, str]]


def test_answers_cite_only_what_the_key_may_read(client: TestClient, auth: Auth, visible: dict[str, set[str]]) -> None:
    from ferret.core.encoder.registry import base_model_path
    from ferret.core.qa.reader_store import readers_root
    from ferret.core.qa.span_reader import SpanReader

    body = {"question": "Who holds the volcano drilling contract?", "k": 5}
    none_yet = client.post("/v1/corpora/kb/ask", json=body, headers=auth("search-a"))
    assert none_yet.status_code == 404 and "No span reader is trained yet" in none_yet.json()["detail"]
    settings = client.app.state.ferret.settings  # type: ignore[attr-defined]
    SpanReader.build(base_model_path()).save(readers_root(settings) / "plain", info={"untrained": True})

    for key, group in (("search-a", "a"), ("search-b", "b"), ("search-public", "public")):
        response = client.post("/v1/corpora/kb/ask", json=body, headers=auth(key))
        assert response.status_code == 200, response.text
        result = response.json()
        read = {p["document"] for p in result["passages"]}
        assert read and read <= visible[group], (key, read)
        assert math.isclose(sum(p["retrieval_probability"] for p in result["passages"]), 1.0, rel_tol=1e-6)
        for answer in result["answers"]:
            assert answer["text"] and 0.0 < answer["probability"] <= 1.0
            assert {p["document"] for p in answer["provenance"]} <= read

    assert client.post("/v1/corpora/kb/ask", json=body, headers=auth("ingest-a")).status_code == 403
    unknown = client.post("/v1/corpora/kb/ask", json={**body, "reader": "nope"}, headers=auth("search-a"))
    assert unknown.status_code == 404 and "No span reader named 'nope'" in unknown.json()["detail"]
    path = client.post("/v1/corpora/kb/ask", json={**body, "reader": "../readers/plain"}, headers=auth("search-a"))
    assert path.status_code == 404
    named = client.post("/v1/corpora/kb/ask", json={**body, "reader": "plain"}, headers=auth("search-a"))
    assert named.status_code == 200
    assert client.post("/v1/corpora/kb/ask", json={**body, "k": 0}, headers=auth("search-a")).status_code == 422
    assert client.post("/v1/corpora/nope/ask", json=body, headers=auth("search-a")).status_code == 404
