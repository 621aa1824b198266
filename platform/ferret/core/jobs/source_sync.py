"""A configured source's sync as a job: what the admin's "Sync now" starts, so the sync runs on a worker (or in a
thread of the admin's process without a broker) instead of inside the page's request.

One stage on the CPU queue. It is ``ferret.core.sources.service.sync_source`` with the job's bookkeeping around it:
the sync's counts after every checkpoint are the job's counts (the Jobs page shows them), and a cancel stops the
sync at its next checkpoint, whose committed work stays, as a failed sync's does. The sync's own run row (its
report and history) is written as for ``ferret source sync``; the job's result names that row. Delivering the step
twice is safe: a sync resumes from the source's checkpoint and skips unchanged documents by content hash.

Example:
    >>> run_job(settings, SOURCE_SYNC, {"job_id": 9, "corpus": "kb", "source": "wiki"}, connectors=build_connector)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.job import active_jobs, create_job
from ferret.core.db.models import Job, Source
from ferret.core.db.source import run_summary
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.jobs.progress import JobStopped
from ferret.core.pipeline.declaration import (
    JobLaunch,
    LaunchContext,
    MissingResource,
    Pipeline,
    Resource,
    Stage,
    StageContext,
    WorkerQueue,
    json_state,
    payload_job_id,
)
from ferret.core.sources.incremental import IncrementalConnector
from ferret.core.sources.service import (
    check_syncable,
    find_configured,
    not_incremental,
    source_corpus,
    sync_source,
)
from ferret.core.sources.sync import SyncFailedError, SyncReport

JOB_SOURCE_SYNC = "source_sync"

Payload = dict[str, Any]


def sync_jobs(session: Session, source: Source, *, limit: int = 1) -> list[Job]:
    """The newest sync jobs of ``source``, newest first (the admin follows the first)."""
    query = (
        select(Job)
        .where(
            Job.kind == JOB_SOURCE_SYNC,
            Job.corpus_id == source.corpus_id,
            Job.params["source"].as_string() == source.name,  # JSON path: SQLite's json_extract, PostgreSQL's ->>
        )
        .order_by(Job.id.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def prepare_sync(
    context: LaunchContext, *, source: Source, trigger: str = "manual", checkpoint_every: int = 100, full: bool = False
) -> JobLaunch:
    """A sync job of ``source`` (``JobQueue.start_job("source_sync", session, source=..., trigger=...)``).

    Refused in one sentence, with nothing written, when the source's connector has no incremental sync or a sync
    job of the source is already queued or running (two syncs of one source would race on its checkpoint)."""
    if context.connector_class is None:
        raise MissingResource("a source sync job is started with the connector registry")
    check_syncable(context.session, source)
    if checkpoint_every < 1:
        raise InvalidInputError("--checkpoint-every must be 1 or more.")
    return _launch(context.session, source, context.connector_class(source.kind), trigger, checkpoint_every, full)


def start_payload(session: Session, source: Source, connector_class: type, *, trigger: str) -> tuple[Job, Payload]:
    """The queued job row (flushed, not committed) and first payload of a sync of ``source``: what ``start_job``
    writes, without placing the job (tests and callers that run it themselves)."""
    launch = _launch(session, source, connector_class, trigger)
    job = create_job(session, JOB_SOURCE_SYNC, corpus_id=launch.corpus_id)
    job.params, job.payload = launch.begin(job.id)
    return job, dict(job.payload)


def _launch(
    session: Session,
    source: Source,
    connector_class: type,
    trigger: str,
    checkpoint_every: int = 100,
    full: bool = False,
) -> JobLaunch:
    if not issubclass(connector_class, IncrementalConnector):
        raise not_incremental(source.kind)
    if running := active_jobs(session, JOB_SOURCE_SYNC, corpus_id=source.corpus_id, source=source.name):
        raise ConflictError(
            f"Source {source.name!r} is already syncing in job {running[0].id}; wait for it or cancel it."
        )
    corpus = source_corpus(session, source)
    params: Payload = {"source": source.name, "trigger": trigger, **({"full": True} if full else {})}
    first = {"job_id": 0, "corpus": corpus.name, **params, "checkpoint_every": checkpoint_every}
    return JobLaunch(corpus.id, lambda job_id: (params, {**first, "job_id": job_id}))


def run_source_sync(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, corpus, source (a configured source's name), trigger, full. Returns the sync's summary."""
    source = find_configured(context.session, payload["corpus"], payload["source"])

    def checkpoint(report: SyncReport) -> None:
        context.add_counts(**_counts(report.counts()))
        context.progress("syncing", 0.0)  # a source does not say how many documents it holds; checks for a cancel

    try:
        run = sync_source(
            context.session,
            context.settings,
            context.backend,
            context.connectors,
            source,
            trigger=str(payload.get("trigger") or "job"),
            checkpoint_every=int(payload.get("checkpoint_every") or 100),
            on_checkpoint=checkpoint,
            full=bool(payload.get("full")),
        )
    except SyncFailedError as error:
        if isinstance(error.__cause__, JobStopped):
            raise error.__cause__ from None  # a cancel: the job is cancelled, not failed
        raise
    summary = run_summary(run)
    return {"sync_run": run.id, "state": summary["state"], **summary["counts"]}


COUNTS = ("new", "changed", "unchanged", "deleted", "permission_updates", "skipped")
"""The sync report's counts that the Jobs page shows beside the progress bar."""


def _counts(payload: Payload) -> dict[str, Any]:
    return {key: payload[key] for key in COUNTS if key in payload}


SOURCE_SYNC: Pipeline[Payload] = Pipeline(
    kind=JOB_SOURCE_SYNC,
    stages=(
        Stage(
            "sync",
            run_source_sync,
            WorkerQueue.CPU,
            needs=frozenset({Resource.CONNECTORS, Resource.INDEX}),
            task="ferret.sources.sync_source",
        ),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    counts=_counts,
    description="Sync one configured source now, from its checkpoint (new, changed, deleted, permissions).",
    prepare=prepare_sync,
)
