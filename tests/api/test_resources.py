"""Corpora, tasks, index versions and jobs over HTTP, and the OpenAPI document that describes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from ferret.api.app import create_app
from ferret.core.db.corpus import get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.model_version import create_model_version
from ferret.core.db.search_config import create_search_config
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.fusion import Fusion

Auth = Callable[[str], dict[str, str]]


def test_corpora_list_create_get(client: TestClient, auth: Auth) -> None:
    listed = client.get("/v1/corpora", headers=auth("search-a")).json()["corpora"]
    kb = next(c for c in listed if c["name"] == "kb")
    assert kb["documents"] == 5 and kb["active_index_version"] == 1 and kb["max_passage_tokens"] == 64

    response = client.post("/v1/corpora", json={"name": "notes", "description": "Team notes"}, headers=auth("admin"))
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["name"], created["documents"], created["active_index_version"]) == ("notes", 0, None)
    assert client.get("/v1/corpora/notes", headers=auth("search-b")).json()["description"] == "Team notes"
    assert client.post("/v1/corpora", json={"name": "notes"}, headers=auth("admin")).status_code == 409
    assert client.post("/v1/corpora", json={"name": "Bad Name"}, headers=auth("admin")).status_code == 422
    overlap = {"name": "x1", "max_passage_tokens": 64, "passage_overlap_tokens": 40}
    assert client.post("/v1/corpora", json=overlap, headers=auth("admin")).status_code == 422
    assert client.get("/v1/corpora/nowhere", headers=auth("search-a")).status_code == 404


def test_corpus_counts_are_within_the_callers_groups(
    client: TestClient, auth: Auth, visible: dict[str, set[str]]
) -> None:
    # Issue 11, item 4: a search key learnt how many documents it cannot read.
    for key, group in (("search-a", "a"), ("search-b", "b"), ("search-public", "public")):
        kb = client.get("/v1/corpora/kb", headers=auth(key)).json()
        assert kb["documents"] == len(visible[group]), key
        assert kb["passages"] == len(visible[group]), key  # one passage per (one-line) document
        listed = client.get("/v1/corpora", headers=auth(key)).json()["corpora"]
        assert next(c for c in listed if c["name"] == "kb")["documents"] == len(visible[group])
    for key in ("admin", "owner"):
        assert client.get("/v1/corpora/kb", headers=auth(key)).json()["documents"] == 6


def test_index_versions_list_promote_rollback(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    versions = client.get("/v1/corpora/live/index-versions", headers=admin).json()["versions"]
    assert [(v["version"], v["state"]) for v in versions] == [(1, "ready"), (2, "active")]
    assert versions[0]["model"] == "base" and versions[1]["point_count"] >= 1

    rolled = client.post("/v1/corpora/live/index-versions/rollback", headers=admin)
    assert rolled.status_code == 200 and rolled.json()["version"] == 1 and rolled.json()["state"] == "active"
    search = client.post("/v1/corpora/live/search", json={"query": "fjords"}, headers=auth("search-a"))
    assert search.status_code == 200 and search.json()["results"][0]["external_id"] == "seed"

    promoted = client.post("/v1/corpora/live/index-versions/2/promote", headers=admin)
    assert promoted.status_code == 200 and promoted.json()["state"] == "active" and promoted.json()["note"] is None
    assert (promoted.json()["activated_by"], promoted.json()["activated_via"]) == ("key:admin", "promote")
    listing = client.get("/v1/corpora/live/index-versions", headers=admin).json()
    last = {v["version"]: (v["activated_by"], v["activated_via"]) for v in listing["versions"]}
    assert last[1] == ("key:admin", "rollback") and last[2] == ("key:admin", "promote")
    steps = [(a["version"], a["actor"], a["via"], a["withdrawn"]) for a in listing["activations"]][-2:]
    assert steps == [(1, "key:admin", "rollback", False), (2, "key:admin", "promote", False)]
    assert client.post("/v1/corpora/live/index-versions/9/promote", headers=admin).status_code == 404
    assert client.post("/v1/corpora/live/index-versions/0/promote", headers=admin).status_code == 422
    assert client.post("/v1/corpora/kb/index-versions/rollback", headers=admin).status_code == 409  # nothing older
    assert client.get("/v1/corpora/nowhere/index-versions", headers=admin).status_code == 404


def test_an_index_version_is_built_over_http_and_bad_input_starts_no_job(
    tmp_path: Path, make_installation: Callable[[Path], Any]
) -> None:
    """A server without shell access could list, promote and roll back versions but not build one."""
    installation = make_installation(tmp_path)
    admin = {"Authorization": f"Bearer {installation.keys['admin']}"}
    url = "/v1/corpora/kb/index-versions"
    with TestClient(create_app(installation.settings)) as client:
        refused = {
            404: ({"model": "nope"}, "/v1/corpora/kb/index-versions", "Model version 'nope' does not exist"),
            422: ({"model": "base", "colour": "red"}, url, "The request is not valid at 'body.colour'"),
        }
        for code, (body, path, sentence) in refused.items():
            response = client.post(path, json=body, headers=admin)
            assert response.status_code == code and response.json()["detail"].startswith(sentence), response.text
        assert client.post("/v1/corpora/nowhere/index-versions", json={}, headers=admin).status_code == 404
        search_key = {"Authorization": f"Bearer {installation.keys['search-a']}"}
        assert client.post(url, json={}, headers=search_key).status_code == 403
        assert client.get("/v1/jobs", headers=admin).json()["jobs"] == []  # nothing was started

        started = client.post(url, json={"promote": True}, headers=admin)

        assert started.status_code == 202, started.text
        job = started.json()
        assert (job["kind"], job["params"]) == ("index_build", {"model": "base", "promote": True, "actor": "key:admin"})
        done = client.get(f"/v1/jobs/{job['id']}", params={"wait": 60}, headers=admin).json()
        assert done["state"] == "succeeded" and done["result"]["version"] == 2, done
        listing = client.get(url, headers=admin).json()
        assert [(v["version"], v["state"]) for v in listing["versions"]] == [(1, "ready"), (2, "active")]
        assert listing["activations"][-1]["actor"] == "key:admin"
        search = client.post("/v1/corpora/kb/search", json={"query": "fjords"}, headers=admin)
        assert search.status_code == 200 and search.json()["results"], search.text


def test_search_configs_list_carries_the_activation_history(
    tmp_path: Path, make_installation: Callable[[Path], Any]
) -> None:
    # An installation of its own: an active configuration changes how every search of its corpus ranks.
    installation = make_installation(tmp_path)
    with session_scope(installation.settings.database_url) as session:
        corpus = get_corpus(session, "kb")
        base = ModelRegistry(session, installation.settings).ensure_base()
        for weight in (0.0, 1.0):
            create_search_config(session, corpus, base, Fusion("convex", weight).to_json())
    admin = {"Authorization": f"Bearer {installation.keys['admin']}"}
    with TestClient(create_app(installation.settings)) as client:
        assert client.get("/v1/corpora/kb/search-configs", headers=admin).json()["activations"] == []
        for path in ("1/promote", "2/promote", "rollback"):
            response = client.post(f"/v1/corpora/kb/search-configs/{path}", headers=admin)
            assert response.status_code == 200, response.text
        listing = client.get("/v1/corpora/kb/search-configs", headers=admin).json()
    assert [(c["version"], c["active"]) for c in listing["configs"]] == [(1, True), (2, False)]
    steps = [(a["version"], a["actor"], a["via"], a["withdrawn"]) for a in listing["activations"]]
    assert steps == [
        (1, "key:admin", "promote", True),
        (2, "key:admin", "promote", True),
        (1, "key:admin", "rollback", False),
    ]


def test_promoting_another_models_index_under_an_active_configuration_says_search_does_not_change(
    tmp_path: Path, make_installation: Callable[[Path], Any]
) -> None:
    """The configuration names its retriever: promoting the index of another model answered 200 "active" while every
    search went on reading the configuration's model's index."""
    installation = make_installation(tmp_path)
    settings = installation.settings
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with session_scope(settings.database_url) as session:
            corpus = get_corpus(session, "kb")
            base = ModelRegistry(session, settings).ensure_base()
            tuned = create_model_version(session, "tuned", base.path, base.dimension, parent=base)
            VersionedCollection(session, settings, backend, corpus).build(tuned)
            create_search_config(session, corpus, base, Fusion("convex", 0.8).to_json())
    finally:
        backend.close()
    admin = {"Authorization": f"Bearer {installation.keys['admin']}"}
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/corpora/kb/search-configs/1/promote", headers=admin).status_code == 200

        promoted = client.post("/v1/corpora/kb/index-versions/2/promote", headers=admin)

        assert promoted.status_code == 200 and promoted.json()["model"] == "tuned"
        assert promoted.json()["note"] == (
            "Search configuration 1 is active and searches with retriever 'base', so searches keep reading that "
            "model's index; to search with 'tuned', promote a configuration that uses it (POST "
            '/v1/corpora/kb/search-configs with {"retriever": "tuned"}, then its promote route).'
        )
        rolled = client.post("/v1/corpora/kb/index-versions/rollback", headers=admin)
        assert rolled.status_code == 200 and rolled.json()["model"] == "base" and rolled.json()["note"] is None


def test_a_search_configuration_is_made_by_hand_over_http_and_bad_input_stores_nothing(
    tmp_path: Path, make_installation: Callable[[Path], Any]
) -> None:
    installation = make_installation(tmp_path)
    admin = {"Authorization": f"Bearer {installation.keys['admin']}"}
    url = "/v1/corpora/kb/search-configs"
    with TestClient(create_app(installation.settings)) as client:
        made = client.post(url, json={"fusion": "convex", "alpha": 1.0, "note": "dense only"}, headers=admin)
        assert made.status_code == 201, made.text
        assert (made.json()["version"], made.json()["fusion"], made.json()["active"]) == (
            1,
            "convex α=1.00 (tmm)",
            False,
        )
        refused = {
            404: ({"retriever": "nope"}, "Model 'nope' is not registered;"),
            422: ({"reranker": "base"}, "Model 'base' is a retriever, not a reranker (a cross-encoder)."),
        }
        for code, (body, sentence) in refused.items():
            response = client.post(url, json=body, headers=admin)
            assert response.status_code == code and response.json()["detail"].startswith(sentence), response.text
        invalid: list[dict[str, Any]] = [{"alpha": 1.5}, {"fusion": "mean"}, {"retriever": "base", "colour": "red"}]
        for bad in invalid:
            assert client.post(url, json=bad, headers=admin).status_code == 422, bad
        search_key = {"Authorization": f"Bearer {installation.keys['search-a']}"}
        assert client.post(url, json={}, headers=search_key).status_code == 403
        listing = client.get(url, headers=admin).json()
        assert [(c["version"], c["note"]) for c in listing["configs"]] == [(1, "dense only")]  # nothing else stored
        assert client.post(f"{url}/1/promote", headers=admin).status_code == 200
        search = client.post("/v1/corpora/kb/search", json={"query": "fjords", "config": "1"}, headers=admin)
        assert search.status_code == 200, search.text
        as_number = client.post("/v1/corpora/kb/search", json={"query": "fjords", "config": 1}, headers=admin)
        # the version as a JSON number, as `--config 1` takes it
        assert as_number.json()["results"] == search.json()["results"]
        unknown = client.post("/v1/corpora/kb/search", json={"query": "fjords", "config": 99}, headers=admin)
        assert unknown.status_code == 404, unknown.text


def task_body(name: str, examples: int = 2) -> dict[str, Any]:
    return {
        "name": name,
        "corpus": "kb",
        "description": "Find the volcano document for a question.",
        "e_doc": "Document",
        "e_query": "Question",
        "examples": [
            {"query": "what comes out of a volcano", "document": "pub-1"},
            {"query": "when does the museum open", "document_text": "The volcano museum opens at nine."},
        ][:examples],
    }


def test_tasks_create_list_get_delete(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    response = client.post("/v1/tasks", json=task_body("volcano-qa"), headers=admin)
    assert response.status_code == 201, response.text
    task = response.json()
    assert task["corpus"] == "kb" and task["runs"] == 0 and task["examples"][0]["document"] == "pub-1"
    assert task["generation"]["queries_per_doc"] == 8
    assert "volcano-qa" in [t["name"] for t in client.get("/v1/tasks", headers=admin).json()["tasks"]]
    assert client.get("/v1/tasks/volcano-qa", headers=admin).json() == task
    assert client.post("/v1/tasks", json=task_body("volcano-qa"), headers=admin).status_code == 409

    one_example = client.post("/v1/tasks", json=task_body("too-few", examples=1), headers=admin)
    assert one_example.status_code == 422
    assert one_example.json()["detail"] == (
        "Task 'too-few' has 1 example; a few-shot task needs 2 to 8 (or make it zero-shot)."
    )
    elsewhere = client.post("/v1/tasks", json={**task_body("lost"), "corpus": "nowhere"}, headers=admin)
    assert elsewhere.status_code == 404

    assert client.delete("/v1/tasks/volcano-qa", headers=admin).status_code == 204
    assert client.get("/v1/tasks/volcano-qa", headers=admin).status_code == 404
    assert client.delete("/v1/tasks/volcano-qa", headers=admin).status_code == 404


def test_a_task_example_the_key_may_not_read_answers_as_a_missing_document(client: TestClient, auth: Auth) -> None:
    """A 201 for a restricted document against a 422 for a missing one told an admin key which documents exist."""
    body = task_body("beta-qa")
    body["examples"][0] = {"query": "who drills the volcano", "document": "b-1"}  # group b only

    hidden = client.post("/v1/tasks", json=body, headers=auth("admin-a"))  # groups: a
    body["examples"][0]["document"] = "b-2"  # no such document
    missing = client.post("/v1/tasks", json=body, headers=auth("admin-a"))

    assert (hidden.status_code, missing.status_code) == (422, 422)
    assert hidden.json()["detail"] == (
        "Example 1's document 'b-1' is not in corpus 'kb'; did you mean 'ab-1'? Or give the text as 'document_text'."
    )  # a suggestion the key may read
    assert "b-1" not in missing.json()["detail"]  # no "did you mean 'b-1'?" either
    body["examples"][0]["document"] = "ab-1"  # shared with a: readable
    assert client.post("/v1/tasks", json=body, headers=auth("admin-a")).status_code == 201
    assert client.delete("/v1/tasks/beta-qa", headers=auth("admin")).status_code == 204


def test_pipeline_config_fields_match_the_pipeline() -> None:
    from ferret.api.schemas import PipelineConfigIn
    from ferret.core.pipeline.promptagator.state import PipelineConfig

    fields = {f.name: f.default for f in dataclasses.fields(PipelineConfig)}
    assert fields == PipelineConfigIn().model_dump()


def test_unknown_jobs_are_404(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    assert client.get("/v1/jobs/987654", headers=admin).status_code == 404
    assert client.post("/v1/jobs/987654/cancel", headers=admin).status_code == 404
    assert client.post("/v1/jobs", json={"task": "no-such-task"}, headers=admin).status_code == 404
    assert client.get("/v1/jobs", params={"state": "sleeping"}, headers=admin).status_code == 422
    bad = {"task": "x", "config": {"held_out_fraction": 1.0}}
    assert client.post("/v1/jobs", json=bad, headers=admin).status_code == 422


def test_openapi_describes_every_route_with_models_and_security(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert set(schema["components"]["securitySchemes"]) == {"BearerKey", "ApiKeyHeader"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            ok = next(code for code in operation["responses"] if code.startswith("2"))
            if ok != "204":
                assert "$ref" in str(operation["responses"][ok]), (method, path)
            if path != "/health":
                assert operation["security"] == [{"BearerKey": []}, {"ApiKeyHeader": []}], (method, path)
                assert {"401", "403"} <= set(operation["responses"]), (method, path)


def test_api_keys_create_list_revoke(client: TestClient, auth: Auth, visible: dict[str, set[str]]) -> None:
    admin = auth("owner")  # only an owner grants a group it does not hold (test_key_management.py)
    body = {"name": "http-made", "scopes": ["search"], "acl_groups": ["b"]}
    response = client.post("/v1/api-keys", json=body, headers=admin)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["key"].startswith(f"fk_{created['prefix']}_") and created["scopes"] == ["search"]
    made = {"Authorization": f"Bearer {created['key']}"}
    # The new key searches with its own groups, and nothing more.
    hits = client.post("/v1/corpora/kb/search", json={"query": "volcano", "k": 20}, headers=made).json()["results"]
    assert {hit["external_id"] for hit in hits} == visible["b"]
    assert client.get("/v1/api-keys", headers=made).status_code == 403

    listed = client.get("/v1/api-keys", headers=admin).json()["keys"]
    assert "http-made" in {key["name"] for key in listed} and "revoked" not in {key["name"] for key in listed}
    assert all("key" not in key and "key_hash" not in key for key in listed)  # secrets are never listed
    every = client.get("/v1/api-keys", params={"include_revoked": True}, headers=admin).json()["keys"]
    assert next(key for key in every if key["name"] == "revoked")["revoked_at"] is not None

    assert client.post("/v1/api-keys", json=body, headers=admin).status_code == 409
    for bad in ({**body, "name": "Bad Name"}, {**body, "scopes": ["root"]}, {**body, "scopes": []}):
        assert client.post("/v1/api-keys", json=bad, headers=admin).status_code == 422, bad

    revoked = client.delete("/v1/api-keys/http-made", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.post("/v1/corpora/kb/search", json={"query": "volcano"}, headers=made).status_code == 401
    assert client.delete("/v1/api-keys/http-made", headers=admin).status_code == 200  # again: nothing changes
    assert client.delete("/v1/api-keys/nobody", headers=admin).status_code == 404
    own = client.delete("/v1/api-keys/owner", headers=admin)
    assert own.status_code == 409 and "key of this request" in own.json()["detail"]
