"""A poisoned document must not break a corpus (issue 11, item 1).

The reproduction: an ``ingest``-scope key pushes a document whose metadata is nested ~130 levels deep. Qdrant
Edge took such a point, then could not read its own write-ahead log once the shard was reloaded, and every search,
push and delete of the corpus answered 500 for good. Now the push is refused (422) at the entry; a version that was
poisoned anyway (data written before the limits) is failed on load, the corpus serves from its last good version,
and ``ferret index repair`` quarantines the document and rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from ferret.api.app import create_app
from ferret.cli.main import app as cli_app
from ferret.core.db.audit import list_events
from ferret.core.db.corpus import get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.models import Document, IndexState, Job, JobState, Passage
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.points import Expansion
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings, get_settings
from ferret.core.sources.documents import Document as SourceDocument

DEPTH = 130


def nested(depth: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        metadata = {"k": metadata}
    return metadata


@pytest.fixture
def home(tmp_path: Path, make_installation: Callable[[Path], Any]) -> Any:
    return make_installation(tmp_path / "home")


@pytest.fixture
def client(home: Any) -> Iterator[TestClient]:
    with TestClient(create_app(home.settings)) as test_client:
        yield test_client


def headers(home: Any, key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {home.keys[key]}"}


def search(client: TestClient, home: Any, query: str = "glaciers fjords") -> Any:
    return client.post(
        "/v1/corpora/live/search", json={"query": query, "k": 5, "mode": "sparse"}, headers=headers(home, "admin")
    )


def test_deep_metadata_is_refused_at_the_push_api(client: TestClient, home: Any) -> None:
    document = {"external_id": "deep", "text": "Glaciers carve fjords.", "metadata": nested(DEPTH)}
    response = client.post(
        "/v1/corpora/live/documents", json={"documents": [document]}, headers=headers(home, "ingest-a")
    )
    assert response.status_code == 422, response.text
    assert "nested deeper than 8 levels" in response.json()["detail"]
    wide = {
        "external_id": "wide",
        "text": "x",
        "metadata": {f"k{i}": {f"j{j}": j for j in range(10)} for i in range(30)},
    }
    response = client.post("/v1/corpora/live/documents", json={"documents": [wide]}, headers=headers(home, "ingest-a"))
    assert response.status_code == 422 and "more than 256 keys" in response.json()["detail"]
    assert search(client, home).status_code == 200


def test_connectors_get_the_same_limits() -> None:
    skipped = SourceDocument.or_skipped(external_id="deep.json", text="x", metadata=nested(DEPTH))
    assert not isinstance(skipped, SourceDocument)
    assert skipped.reason == "metadata is nested deeper than 8 levels"
    with pytest.raises(ValueError, match="deeper than 8"):
        SourceDocument(external_id="deep.json", text="x", metadata=nested(9))
    assert isinstance(SourceDocument.or_skipped(external_id="ok", text="x", metadata=nested(8)), SourceDocument)


def poison_active_version(settings: FerretSettings, version: int | None = None) -> str:
    """What a push did before the limits: the document in the database and its point in the active shard (or in
    that of ``version``)."""
    with session_scope(settings.database_url) as session:
        corpus = get_corpus(session, "live")
        document = Document(
            corpus_id=corpus.id,
            source="push",
            external_id="poison",
            title="",
            body="Glaciers and fjords, poisoned.",
            meta=nested(DEPTH),
            acl_groups=["public"],
            content_hash="0" * 64,
        )
        document.passages = [Passage(corpus_id=corpus.id, ordinal=0, text=document.body, token_count=6)]
        session.add(document)
        session.commit()
        poisoned = next(
            v
            for v in list_index_versions(session, corpus)
            if (v.state == IndexState.ACTIVE if version is None else v.version == version)
        )
        collection = poisoned.collection
    shard = qe.EdgeShard.load(str(settings.qdrant_path / "collections" / collection))
    point = qe.Point(
        "00000000-0000-0000-0000-000000000001",
        {"dense": [1.0] + [0.0] * 383, "bm25": qe.SparseVector(indices=[1], values=[1.0])},
        {"metadata": nested(DEPTH), "acl_groups": ["public"]},
    )
    shard.update(qe.UpdateOperation.upsert_points([point]))
    shard.close()
    return collection


def test_a_poisoned_version_fails_on_reload_and_the_corpus_serves_from_the_last_good_one(
    home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = home.settings
    poisoned = poison_active_version(settings)  # live__v2; live__v1 is the ready version before it
    with TestClient(create_app(settings)) as client:  # the shard is loaded afresh
        response = search(client, home)
        assert response.status_code == 200, response.text
        assert [hit["external_id"] for hit in response.json()["results"]] == ["seed"]
        pushed = client.post(
            "/v1/corpora/live/documents",
            json={"documents": [{"external_id": "after", "text": "Fjords after the poison."}]},
            headers=headers(home, "ingest-a"),
        )
        assert pushed.status_code == 200, pushed.text
        deleted = client.post(
            "/v1/corpora/live/documents/delete", json={"external_ids": ["poison"]}, headers=headers(home, "ingest-a")
        )
        assert deleted.status_code == 200 and deleted.json()["deleted"] == 1
        versions = client.get("/v1/corpora/live/index-versions", headers=headers(home, "admin")).json()["versions"]
    states = {v["collection"]: (v["state"], v["error"]) for v in versions}
    assert states[poisoned][0] == "failed" and "cannot be loaded" in states[poisoned][1]
    assert states["live__v1"][0] == "active"
    with session_scope(settings.database_url) as session:
        assert [e.action for e in list_events(session)][:2] == ["index.promote", "index.unreadable"]


def repair_live(settings: FerretSettings, monkeypatch: pytest.MonkeyPatch) -> str:
    """``ferret index repair --corpus live`` on this home; its output."""
    monkeypatch.setenv("FERRET_HOME", str(settings.home))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli_app, ["index", "repair", "--corpus", "live"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    return result.output


def test_repair_quarantines_the_document_and_rebuilds(home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = home.settings
    poison_active_version(settings)
    output = repair_live(settings, monkeypatch)
    assert "quarantined poison: metadata is nested deeper than 8 levels" in output
    assert "built and promoted version 3" in output
    with session_scope(settings.database_url) as session:
        row = session.scalar(select(Document).where(Document.external_id == "poison"))
        assert row is not None and row.quarantine_reason == "metadata is nested deeper than 8 levels"
        states = {v.version: v.state for v in list_index_versions(session, get_corpus(session, "live"))}
    assert states == {1: IndexState.READY, 2: IndexState.FAILED, 3: IndexState.ACTIVE}
    with session_scope(settings.database_url) as session:  # a job row, as every long command (issue 11, item 10)
        (job,) = session.scalars(select(Job).where(Job.kind == "index_repair"))
        assert job.state == JobState.SUCCEEDED and job.result is not None and job.result["rebuilt"] == 3
    with TestClient(create_app(settings)) as client:
        response = search(client, home, "glaciers fjords poisoned")
        assert response.status_code == 200
        assert [hit["external_id"] for hit in response.json()["results"]] == ["seed"]


def test_repair_does_not_rebuild_an_expanded_version_as_a_plain_one(home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = home.settings
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with session_scope(settings.database_url) as session:
            corpus = get_corpus(session, "live")
            seed = session.scalar(select(Document).where(Document.external_id == "seed"))
            assert seed is not None
            model = ModelRegistry(session, settings).ensure_base()
            expansion = Expansion({seed.id: ["norwegian inlets"]}, {"key": "pipeline-1"})
            expanded = VersionedCollection(session, settings, backend, corpus).build(model, expansion=expansion)
            assert expanded.version == 3 and expanded.state == IndexState.READY
    finally:
        backend.close()
    collection = poison_active_version(settings, version=3)
    output = repair_live(settings, monkeypatch)
    assert "failed version(s) that cannot be loaded: 3" in output
    assert "not rebuilt: version(s) 3 held a document expansion" in " ".join(output.split())
    assert "built" not in output.replace("not rebuilt", "")  # no plain duplicate of version 2's model
    with session_scope(settings.database_url) as session:
        states = {v.version: v.state for v in list_index_versions(session, get_corpus(session, "live"))}
    assert states == {1: IndexState.READY, 2: IndexState.ACTIVE, 3: IndexState.FAILED}
    assert not (settings.qdrant_path / "collections" / collection).exists()


def test_with_no_good_version_left_the_error_names_the_repair_command(home: Any) -> None:
    settings = home.settings
    with session_scope(settings.database_url) as session:
        for version in list_index_versions(session, get_corpus(session, "live")):
            if version.state == IndexState.READY:
                version.state = IndexState.RETIRED
        session.commit()
    poison_active_version(settings)
    with TestClient(create_app(settings)) as client:
        response = search(client, home)
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert detail.startswith("Index version 2 of corpus 'live' cannot be loaded (")
    assert detail.endswith(
        "run `ferret index repair --corpus live` to rebuild it from the database (no earlier version can serve)."
    )
