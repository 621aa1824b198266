"""Pushes above the synchronous line: stored in a job row and answered 202, embedded and indexed by the job (a
thread of the API process in embedded mode), searchable once ``GET /v1/jobs/{id}`` says succeeded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ferret.api.app import create_app
from ferret.core.db.engine import session_scope
from ferret.core.db.models import Job, JobState

Auth = Callable[[str], dict[str, str]]
BATCH: list[dict[str, Any]] = [
    {"external_id": "j-1", "title": "Fjords", "text": "Fjords are drowned glacial valleys.", "version": "1"},
    {"external_id": "j-2", "text": "Moraines mark where a glacier stopped.", "acl_groups": ["a"], "version": "1"},
    {"external_id": "j-3", "text": "Icebergs calve from tidewater glaciers.", "metadata": {"lang": "en"}},
    # More than one slice of the job (PUSH_JOB_SLICE documents per transaction).
    *({"external_id": f"f-{i}", "text": f"Filler note {i} on sea ice."} for i in range(17)),
]


@pytest.fixture(scope="module")
def job_installation(tmp_path_factory: pytest.TempPathFactory, make_installation: Any) -> Any:
    return make_installation(Path(tmp_path_factory.mktemp("push-jobs")))


@pytest.fixture(scope="module")
def job_client(job_installation: Any) -> Iterator[tuple[TestClient, Auth]]:
    """An installation whose synchronous line is 2 documents, so BATCH (20) goes through a job."""
    installation = job_installation
    settings = installation.settings.model_copy(update={"push_sync_max_documents": 2})

    def auth(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {installation.keys[name]}"}

    with TestClient(create_app(settings)) as client:
        yield client, auth


def wait_for(client: TestClient, auth: Auth, job_url: str, key: str = "admin") -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = client.get(job_url, headers=auth(key)).json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return dict(job)
        time.sleep(0.1)
    raise AssertionError(f"{job_url} did not finish")


def search_ids(client: TestClient, auth: Auth, key: str, query: str) -> set[str]:
    response = client.post("/v1/corpora/live/search", json={"query": query, "k": 20}, headers=auth(key))
    assert response.status_code == 200, response.text
    return {hit["external_id"] for hit in response.json()["results"]}


def test_a_push_above_the_line_is_a_job_and_searchable_when_it_succeeds(job_client: tuple[TestClient, Auth]) -> None:
    client, auth = job_client
    response = client.post("/v1/corpora/live/documents", json={"documents": BATCH}, headers=auth("ingest-a"))
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["documents"] == 20 and accepted["job_url"] == f"/v1/jobs/{accepted['job_id']}"

    job = wait_for(client, auth, accepted["job_url"])
    assert job["state"] == "succeeded", job["error"]
    assert job["kind"] == "push_index"
    assert job["result"]["added"] == 20 and job["result"]["passages_added"] == 20
    assert "j-1" in search_ids(client, auth, "search-a", "drowned glacial valleys")
    assert "j-2" in search_ids(client, auth, "search-a", "where a glacier stopped")
    assert "j-2" not in search_ids(client, auth, "search-b", "where a glacier stopped")

    # The same batch again is a job that changes nothing (idempotent by version and content).
    again = client.post("/v1/corpora/live/documents", json={"documents": BATCH}, headers=auth("ingest-a")).json()
    assert wait_for(client, auth, again["job_url"])["result"]["unchanged"] == 20


def test_at_or_below_the_line_the_push_stays_synchronous(job_client: tuple[TestClient, Auth]) -> None:
    client, auth = job_client
    small = [{"external_id": "s-1", "text": "Cirques are bowl-shaped hollows carved by glaciers."}]
    response = client.post("/v1/corpora/live/documents", json={"documents": small}, headers=auth("ingest-a"))
    assert response.status_code == 200, response.text
    assert response.json()["added"] == 1
    assert "s-1" in search_ids(client, auth, "search-public", "bowl-shaped hollows carved by glaciers")


def test_mistakes_are_refused_before_any_job(job_client: tuple[TestClient, Auth]) -> None:
    client, auth = job_client
    before = client.get("/v1/jobs", headers=auth("admin")).json()["jobs"]
    unknown = client.post("/v1/corpora/nope/documents", json={"documents": BATCH}, headers=auth("ingest-a"))
    assert unknown.status_code == 404
    bad = [*BATCH[:2], {"external_id": "", "text": "x"}]
    refused = client.post("/v1/corpora/live/documents", json={"documents": bad}, headers=auth("ingest-a"))
    assert refused.status_code == 422
    assert client.get("/v1/jobs", headers=auth("admin")).json()["jobs"] == before


def test_a_job_push_after_a_synchronous_one_shares_the_servers_shards(job_client: tuple[TestClient, Auth]) -> None:
    """Embedded mode: a synchronous push and searches leave the corpus's shards loaded in the API process; the push
    job that follows runs in a thread of the same process and must use those shards, not try to load them a second
    time (Qdrant Edge lets one holder load a shard: it failed with "open in another Ferret process")."""
    client, auth = job_client
    small = [{"external_id": "t-1", "text": "Tarns are small mountain lakes left in cirques."}]
    assert client.post("/v1/corpora/live/documents", json={"documents": small}, headers=auth("ingest-a")).status_code
    assert "t-1" in search_ids(client, auth, "search-public", "small mountain lakes left in cirques")
    batch = [{"external_id": f"n-{i}", "text": f"Nunatak {i} is a peak rising above an ice sheet."} for i in range(5)]
    response = client.post("/v1/corpora/live/documents", json={"documents": batch}, headers=auth("ingest-a"))
    assert response.status_code == 202, response.text
    job = wait_for(client, auth, response.json()["job_url"])
    assert job["state"] == "succeeded", job["error"]
    assert job["result"]["added"] == 5
    assert "n-0" in search_ids(client, auth, "search-public", "Nunatak 0 is a peak rising above an ice sheet")


def test_the_pushing_key_watches_its_job_which_shows_the_batch_size_not_the_batch(
    job_client: tuple[TestClient, Auth], job_installation: Any
) -> None:
    """A connector with an ingest key follows the ``job_url`` it was given; the job shows how many documents it
    holds, not the documents (each poll returned the whole batch, and a job listing every recent batch)."""
    client, auth = job_client
    batch = [{"external_id": f"w-{i}", "text": f"Seracs {i} are ice blocks on a glacier."} for i in range(6)]
    response = client.post("/v1/corpora/live/documents", json={"documents": batch}, headers=auth("ingest-a"))
    assert response.status_code == 202, response.text
    job = wait_for(client, auth, response.json()["job_url"], key="ingest-a")
    assert job["state"] == "succeeded", job["error"]
    assert job["params"] == {"source": "push", "documents": 6}
    listed = client.get("/v1/jobs", headers=auth("admin")).json()["jobs"]
    assert all(not isinstance(row["params"].get("documents"), list) for row in listed if row["kind"] == "push_index")

    with session_scope(job_installation.settings.database_url) as session:
        other = Job(kind="eval", params={"dataset": "held-out questions"})
        session.add(other)
        session.commit()
        other_id = other.id
    refused = client.get(f"/v1/jobs/{other_id}", headers=auth("ingest-a"))
    assert refused.status_code == 403 and "push jobs only" in refused.json()["detail"]
    assert client.get(f"/v1/jobs/{other_id}", headers=auth("admin")).json()["params"] == {
        "dataset": "held-out questions"
    }
    assert client.get(response.json()["job_url"], headers=auth("search-a")).status_code == 403


def test_a_job_read_with_wait_answers_when_the_job_ends(job_client: tuple[TestClient, Auth]) -> None:
    """``?wait=`` holds the request until the job ends: one request instead of polling, and the job it returns has
    ended, so the push is searchable. A job that has ended answers at once; a wait out of range is a 422."""
    client, auth = job_client
    batch = [{"external_id": f"m-{i}", "text": f"Meltwater channel {i} cuts under the glacier."} for i in range(8)]
    response = client.post("/v1/corpora/live/documents", json={"documents": batch}, headers=auth("ingest-a"))
    assert response.status_code == 202, response.text
    job_url = response.json()["job_url"]
    job = client.get(f"{job_url}?wait=60", headers=auth("ingest-a")).json()
    assert job["state"] == "succeeded", job
    assert job["result"]["added"] == 8
    assert "m-3" in search_ids(client, auth, "search-a", "meltwater channel under the glacier")

    started = time.monotonic()
    assert client.get(f"{job_url}?wait=30", headers=auth("ingest-a")).json()["state"] == "succeeded"
    assert time.monotonic() - started < 5  # an ended job does not wait
    for bad in ("61", "-1", "soon"):
        refused = client.get(f"{job_url}?wait={bad}", headers=auth("ingest-a"))
        assert refused.status_code == 422, (bad, refused.text)
    assert client.get(f"{job_url}?wait=1", headers=auth("search-a")).status_code == 403


def test_a_wait_on_a_job_that_does_not_end_answers_when_the_time_is_up(
    job_client: tuple[TestClient, Auth], job_installation: Any
) -> None:
    client, auth = job_client
    with session_scope(job_installation.settings.database_url) as session:
        stuck = Job(kind="push_index", params={"source": "push", "documents": []})
        session.add(stuck)
        session.commit()
        stuck_id = stuck.id
    started = time.monotonic()
    job = client.get(f"/v1/jobs/{stuck_id}?wait=1.5", headers=auth("ingest-a")).json()
    assert job["state"] == "queued"
    assert 1.4 <= time.monotonic() - started < 10


def test_a_failed_job_is_retried_over_http_without_duplicates(
    job_client: tuple[TestClient, Auth], job_installation: Any
) -> None:
    client, auth = job_client
    batch = [{"external_id": f"r-{i}", "text": f"Retry note {i} on firn and névé.", "version": "1"} for i in range(5)]
    accepted = client.post("/v1/corpora/live/documents", json={"documents": batch}, headers=auth("ingest-a")).json()
    assert wait_for(client, auth, accepted["job_url"])["state"] == "succeeded"
    with session_scope(job_installation.settings.database_url) as session:  # its worker died at the end, say
        job = session.get(Job, accepted["job_id"])
        assert job is not None
        job.state, job.error = JobState.FAILED, "The worker died."

    retried = client.post(f"/v1/jobs/{accepted['job_id']}/retry", headers=auth("admin"))

    assert retried.status_code == 202, retried.text
    done = wait_for(client, auth, accepted["job_url"])
    assert done["state"] == "succeeded" and done["error"] is None
    assert done["result"]["unchanged"] == 5 and done["result"]["added"] == 0  # found again, not added twice
    again = client.post(f"/v1/jobs/{accepted['job_id']}/retry", headers=auth("admin"))
    assert again.status_code == 409 and "only a failed or cancelled job can be retried" in again.json()["detail"]
    assert client.post(f"/v1/jobs/{accepted['job_id']}/retry", headers=auth("ingest-a")).status_code == 403
    assert client.post("/v1/jobs/999999/retry", headers=auth("admin")).status_code == 404


def test_a_sync_of_the_push_source_says_there_is_nothing_to_sync(job_client: tuple[TestClient, Auth]) -> None:
    client, auth = job_client
    sources = client.get("/v1/corpora/live/sources", headers=auth("admin")).json()
    assert "push" in str(sources)  # listed beside configured sources, so an admin may try to sync it

    response = client.post("/v1/corpora/live/sources/push/sync", headers=auth("admin"))

    assert response.status_code == 422, response.text
    assert response.json()["detail"] == (
        "Source 'push' receives its documents through the push API (POST /v1/corpora/live/documents); there is "
        "nothing to sync from it."
    )
