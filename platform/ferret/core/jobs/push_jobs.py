"""Pushes that never block a request on embedding: the push API stores the batch in a job row and answers 202; this
one-stage job (gpu queue) chunks, stores, embeds and indexes it through the same ``PushIngestor`` path as a
synchronous push, and the job's ``succeeded`` state is the moment its documents are searchable.

Why a job row holds the batch: it is committed before the API answers, so an accepted push survives a restart of
the API or a lost worker (Celery redelivers the stage; a push is idempotent by external id, version and content
hash, so a second delivery adds nothing). Small batches stay synchronous (``FERRET_PUSH_SYNC_MAX_DOCUMENTS``), where
a job's queueing would cost more than the embedding it moves out of the request.

Example:
    >>> job = runtime.jobs.start_job("push_index", session, corpus="docs", source="push", documents=[record])
    >>> run_job(settings, PUSH_INDEX, {"job_id": job.id, "corpus": corpus.name})
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from ferret.core.corpus.push import PushedDocument, PushIngestor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.job import get_job
from ferret.core.db.models import Corpus
from ferret.core.pipeline.declaration import (
    JobLaunch,
    LaunchContext,
    Pipeline,
    Resource,
    Stage,
    StageContext,
    WorkerQueue,
    json_state,
    payload_job_id,
)
from ferret.core.sources.documents import Document

JOB_PUSH_INDEX = "push_index"
PUSH_JOB_SLICE = 16
"""Documents per transaction of a push job (see ``index_pushed``)."""
_ONE_AT_A_TIME = threading.Lock()
"""Push jobs of one process run one after another: in embedded mode each runs in a thread with its own Qdrant Edge
backend, and a shard is open in one backend at a time (two concurrent jobs failed with "open in another Ferret
process"). A gpu worker runs one task at a time anyway."""

Payload = dict[str, Any]


def pushed_documents(records: list[dict[str, Any]]) -> list[PushedDocument]:
    """The stored batch back as pushed documents (each validated again, as the API did before storing it)."""
    documents = []
    for record in records:
        updated_at = record.get("updated_at")
        documents.append(
            PushedDocument(
                Document(
                    external_id=record["external_id"],
                    title=record.get("title", ""),
                    text=record["text"],
                    source=record["source"],
                    metadata=record.get("metadata") or {},
                    acl_groups=record.get("acl_groups") or ["public"],
                    updated_at=datetime.fromisoformat(updated_at) if updated_at else None,
                ),
                version=record.get("version"),
            )
        )
    return documents


def index_pushed(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, corpus. The batch is the job's ``params``: source and documents. Returns the push report.

    The batch is applied in slices of ``PUSH_JOB_SLICE`` documents, each its own transaction: a push embeds inside
    its transaction, and on SQLite a long one would hold the database's one write lock for the whole batch, so the
    API could not even store the next push (measured: "database is locked" after 30 s with ten 100-document jobs).
    A slice keeps every write transaction to a few seconds; a redelivered job skips the slices already stored."""
    with _ONE_AT_A_TIME:
        try:
            return _index_pushed(context, payload)
        finally:
            context.backend.close()  # before the next job of this process opens the same shards


def _index_pushed(context: StageContext, payload: Payload) -> Payload:
    session = context.session
    job = get_job(session, int(payload["job_id"]))
    params = dict(job.params or {})
    corpus = get_corpus(session, payload["corpus"])
    documents = pushed_documents(list(params.get("documents") or []))
    ingestor = PushIngestor(session, context.settings, context.backend, corpus)
    # The whole batch's new passages in one encoder call, before the slices' transactions (see prefetch_embeddings)
    context.progress("embedding", 0.0)
    ingestor.versions.prefetch_embeddings(ingestor.texts_to_embed(str(params["source"]), documents))
    session.commit()  # end the read transaction the look-up opened: no lock is held while the slices wait
    totals: Payload = {}
    for start in range(0, len(documents), PUSH_JOB_SLICE):
        context.progress("embedding", start / max(len(documents), 1))
        report = ingestor.push(str(params["source"]), documents[start : start + PUSH_JOB_SLICE])
        context.add_counts(added=report.added, updated=report.updated, unchanged=report.unchanged)
        for key, value in report.as_dict().items():
            totals[key] = totals.get(key, [] if isinstance(value, list) else 0) + value
    return totals


def shown_params(params: dict[str, Any]) -> dict[str, Any]:
    """A push job's parameters as the API shows them: the source and the number of documents, not the documents.

    The batch itself stays in the row for the job (and a redelivery) to read; returned by every ``GET`` on the job,
    a 100-document batch made each poll of a connector waiting for its push cost about as much CPU as the embedding
    it waited for (benchmarks/RESULTS.md, issue 16), and a job listing returned every recent batch whole."""
    documents = params.get("documents")
    shown = {key: value for key, value in params.items() if key != "documents"}
    return {**shown, "documents": len(documents) if isinstance(documents, list) else 0}


def prepare_push(
    context: LaunchContext, *, corpus: Corpus | str, source: str, documents: list[dict[str, Any]]
) -> JobLaunch:
    """A pushed batch (the push API's documents as JSON, each with its ``source``) kept in the job's ``params``: the
    job row is committed before the API answers 202, so the batch is durable from then on."""
    row = get_corpus(context.session, corpus) if isinstance(corpus, str) else corpus
    params = {"source": source, "documents": list(documents)}
    return JobLaunch(row.id, lambda job_id: (params, {"job_id": job_id, "corpus": row.name}))


PUSH_INDEX: Pipeline[Payload] = Pipeline(
    kind=JOB_PUSH_INDEX,
    stages=(
        Stage(
            "push_index",
            index_pushed,
            WorkerQueue.GPU,
            needs=frozenset({Resource.INDEX}),
            task="ferret.corpus.index_pushed",
        ),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    description="Store, embed and index a pushed batch of documents; searchable when the job has succeeded.",
    prepare=prepare_push,
)
