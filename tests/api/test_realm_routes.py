"""REALM pre-training over HTTP: start a job on a corpus (admin only), follow it under /v1/realm/jobs, cancel it;
bad settings and a corpus too small for k each get one sentence."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from ferret.api.routers.realm import REALM_CONFIG_FIELDS, RealmConfigIn

Auth = Callable[[str], dict[str, str]]


def test_the_request_schema_carries_every_realm_setting() -> None:
    assert set(RealmConfigIn.model_fields) == REALM_CONFIG_FIELDS


def test_scopes_and_bad_requests(client: TestClient, auth: Auth) -> None:
    assert client.post("/v1/corpora/kb/realm", json={}).status_code == 401
    refused = client.post("/v1/corpora/kb/realm", json={}, headers=auth("search-a"))
    assert refused.status_code == 403 and "lacks the 'admin' scope" in refused.json()["detail"]
    assert client.get("/v1/realm/jobs", headers=auth("ingest-a")).status_code == 403
    missing = client.post("/v1/corpora/nope/realm", json={}, headers=auth("admin"))
    assert missing.status_code == 404 and "Corpus 'nope' does not exist" in missing.json()["detail"]
    for config in ({"k": 0}, {"masking": "every_word"}, {"colour": "red"}, {"held_out_fraction": 1.0}):
        bad = client.post("/v1/corpora/kb/realm", json={"config": config}, headers=auth("admin"))
        assert bad.status_code == 422, (config, bad.text)
    resume = client.post("/v1/corpora/kb/realm", json={"resume_from": 999_999}, headers=auth("admin"))
    assert resume.status_code == 404
    assert client.get("/v1/realm/jobs", headers=auth("admin")).json()["jobs"] == []  # nothing was queued


def test_start_follow_and_fail_with_one_sentence(client: TestClient, auth: Auth) -> None:
    """``kb`` has 6 one-passage documents: k=8 cannot be retrieved outside a sentence's own document, so the job
    ends failed with that sentence (and no model version), seen through the REALM status routes."""
    from ferret.core.db.engine import session_scope
    from ferret.core.db.model_version import find_model_version
    from ferret.workers.dispatch import wait_for_embedded_job

    admin = auth("admin")
    body = {"config": {"k": 8, "steps": 2, "mlm_warmup_steps": 0}, "model_name": "realm-kb-api"}
    started = client.post("/v1/corpora/kb/realm", json=body, headers=admin)
    assert started.status_code == 202, started.text
    job = started.json()
    assert job["kind"] == "realm_pretrain" and job["params"]["model_name"] == "realm-kb-api"
    assert wait_for_embedded_job(job["id"], timeout_s=300)

    status = client.get(f"/v1/realm/jobs/{job['id']}", headers=admin)
    assert status.status_code == 200, status.text
    final = status.json()
    assert final["state"] == "failed" and final["model"] == "realm-kb-api"
    assert "too few to retrieve k=8 outside a sentence's own document" in final["error"]
    listed = client.get("/v1/realm/jobs", params={"corpus": "kb"}, headers=admin).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert client.get("/v1/realm/jobs", params={"corpus": "live"}, headers=admin).json()["jobs"] == []
    settings = client.app.state.ferret.settings  # type: ignore[attr-defined]
    with session_scope(settings.database_url) as session:
        assert find_model_version(session, "realm-kb-api") is None


def test_a_pipeline_job_is_not_a_realm_job(client: TestClient, auth: Auth) -> None:
    from ferret.core.db.engine import session_scope
    from ferret.core.db.job import create_job

    settings = client.app.state.ferret.settings  # type: ignore[attr-defined]
    with session_scope(settings.database_url) as session:
        other = create_job(session, "index_build")
        session.commit()
        other_id = other.id
    wrong = client.get(f"/v1/realm/jobs/{other_id}", headers=auth("admin"))
    assert wrong.status_code == 404 and "is not a REALM pre-training job" in wrong.json()["detail"]
