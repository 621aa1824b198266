"""REALM pre-training through a real Celery gpu worker on a real redis-server: the pipeline declaration's two
stages (pretrain, guard) run on the gpu queue, the WiSE-FT'd retriever is registered once, the internal refresh
collections are dropped and the corpus's served alias is never touched. Tiny sizes: two REALM steps, k=2."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus, get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.models import Document, JobState, ModelVersion, Passage
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.realm.config import RealmConfig
from ferret.workers.dispatch import start_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
PEOPLE = [
    ("Alma Varga", "Lisbon", 1901),
    ("Bruno Moreau", "Tallinn", 1911),
    ("Clara Lindqvist", "Lisbon", 1923),
    ("Dario Okafor", "Krakow", 1911),
    ("Elena Tanaka", "Tallinn", 1948),
    ("Felix Novak", "Krakow", 1923),
]


def add_biographies(session: Session, corpus_name: str) -> int:
    """A biography and a prize notice per person, sharing names, cities and years, so salient spans (names,
    cities, years) recur in another document; one passage each."""
    corpus = create_corpus(session, corpus_name)
    texts = []
    for name, city, year in PEOPLE:
        texts.append((name, f"{name} was born in {city} in {year}. {name} studied botany in {city}."))
        texts.append((f"Medal {year + 30}", f"The medal of {year + 30} went to {name}, who was born in {city}."))
    for number, (title, body) in enumerate(texts, 1):
        session.add(
            Document(
                corpus_id=corpus.id,
                source="tests",
                external_id=f"d{number}",
                title=title,
                body=body,
                content_hash=hashlib.sha256(body.encode()).hexdigest(),
                passages=[Passage(corpus_id=corpus.id, ordinal=0, text=f"{title}. {body}", token_count=24)],
            )
        )
    session.commit()
    return corpus.id


def test_realm_runs_on_the_gpu_worker(session: Session, workers: Any) -> None:
    corpus_id = add_biographies(session, "bios")
    gpu = workers.start("gpu")
    workers.wait_ready(gpu)
    config = RealmConfig(
        steps=2,
        k=2,
        batch_size=2,
        mlm_warmup_steps=1,
        warmup_batch_size=2,
        refresh_every=1,
        eval_every=1,
        checkpoint_every=1,
    )
    job = start_job(
        session,
        workers.settings,
        "realm_pretrain",
        corpus=get_corpus(session, "bios"),
        config=config,
        model_name="realm-bios",
    )
    assert job.celery_id == f"ferret-job-{job.id}-pretrain"

    finished = workers.wait_for(job.id, lambda j: j.state in FINISHED, timeout_s=420)

    assert finished.state == JobState.SUCCEEDED, f"{finished.error}\n{workers.logs()}"
    assert finished.attempts == 2 and finished.progress == 1.0 and finished.corpus_id == corpus_id
    result = finished.result or {}
    assert result["model"] == "realm-bios" and [u["step"] for u in result["utility"]] == [0, 1, 2]
    assert result["refreshes"] >= 1 and result["failed_refreshes"] == 0 and "passed" in result["guard"]
    log = gpu.tail(400)
    assert "ferret.realm.pretrain" in log and "ferret.realm.guard" in log
    with session_scope(workers.settings.database_url) as check:
        models = list(check.scalars(select(ModelVersion).where(ModelVersion.name != "base")))
        assert [m.name for m in models] == ["realm-bios"]
        assert models[0].metrics["realm"]["k"] == 2 and "guard" in models[0].metrics
    backend = EdgeIndexBackend(workers.settings.qdrant_path)
    try:
        assert not [c for c in backend.list_collections() if "__realm" in c]  # internal versions dropped
        assert backend.resolve_alias("bios") is None  # the served alias was never touched
    finally:
        backend.close()
