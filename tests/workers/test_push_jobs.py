"""A pushed batch above the synchronous line, indexed by the gpu worker through real Celery on a real redis-server:
the job row holds the batch, the gpu worker embeds it into the live version, and it is searchable when the job has
succeeded; delivered twice, it adds nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_corpus
from ferret.core.db.models import JobState
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.workers.dispatch import start_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
PUSHED: list[dict[str, Any]] = [
    {"external_id": "p1", "title": "Fjords", "text": "Fjords are drowned glacial valleys.", "source": "push"},
    {"external_id": "p2", "text": "Moraines mark where a glacier stopped.", "acl_groups": ["a"], "source": "push"},
]


def test_the_gpu_worker_indexes_a_pushed_batch(session: Session, workers: Any, facts: Callable[..., int]) -> None:
    facts(session, "facts", "facts-task")
    corpus = get_corpus(session, "facts")
    backend = EdgeIndexBackend(workers.settings.qdrant_path)
    try:  # a live version to push into, then the shard is left to the worker (one process per shard)
        versions = VersionedCollection(session, workers.settings, backend, corpus)
        active = versions.promote(versions.build(ModelRegistry(session, workers.settings).ensure_base()))
        session.commit()
    finally:
        backend.close()
    gpu = workers.start("gpu")
    workers.wait_ready(gpu)

    results = []
    for _ in range(2):
        job = start_job(session, workers.settings, "push_index", corpus=corpus, source="push", documents=PUSHED)
        assert job.params["documents"] == PUSHED  # durable before the caller hears of the job
        results.append(workers.wait_for(job.id, lambda j: j.state in FINISHED))
    gpu.stop()

    assert [job.state for job in results] == [JobState.SUCCEEDED] * 2, results[0].error
    assert "ferret.corpus.index_pushed" in gpu.tail(400)
    assert results[0].result is not None and results[0].result["added"] == 2
    assert results[1].result is not None and results[1].result["unchanged"] == 2
    backend = EdgeIndexBackend(workers.settings.qdrant_path)
    try:
        assert backend.count(active.collection) == 20 + 2
        searcher = Searcher.over(session, workers.settings, backend)
        found = searcher.search("facts", "drowned glacial valleys", k=3, acl_groups=["public"])
        assert found[0].external_id == "p1"
        hidden = searcher.search("facts", "where a glacier stopped", k=22, acl_groups=["public"])
        assert "p2" not in {r.external_id for r in hidden}
    finally:
        searcher.close()
        backend.close()
