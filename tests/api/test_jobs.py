"""Jobs over HTTP: start the pipeline of a task (in-process thread in embedded mode), list it, cancel it."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

Auth = Callable[[str], dict[str, str]]


def test_start_list_get_and_cancel_a_pipeline_job(client: TestClient, auth: Auth) -> None:
    from ferret.workers.dispatch import wait_for_embedded_job

    admin = auth("admin")
    task = {
        "name": "job-task",
        "corpus": "kb",
        "examples": [
            {"query": "what comes out of a volcano", "document": "pub-1"},
            {"query": "when does the museum open", "document": "pub-2"},
        ],
    }
    assert client.post("/v1/tasks", json=task, headers=admin).status_code == 201
    config = {"max_documents": 1, "queries_per_doc": 1, "max_steps": 1, "promote": "never"}
    response = client.post("/v1/jobs", json={"task": "job-task", "config": config}, headers=admin)
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["kind"] == "pipeline" and job["params"]["task"] == "job-task"
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=admin)
    assert cancelled.status_code == 202 and cancelled.json()["cancel_requested"]
    assert wait_for_embedded_job(job["id"], timeout_s=300)

    final = client.get(f"/v1/jobs/{job['id']}", headers=admin).json()
    assert final["state"] == "cancelled", final
    listed = client.get("/v1/jobs", params={"corpus": "kb", "state": "cancelled"}, headers=admin).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert client.get("/v1/jobs", params={"corpus": "live"}, headers=admin).json()["jobs"] == []
