"""Queries on generation runs and the synthetic queries they wrote."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ferret.core.db.job import process_alive, process_identity
from ferret.core.db.models import (
    Corpus,
    Document,
    GenerationRun,
    GenerationState,
    QueryStatus,
    RetrievalTask,
    SyntheticQuery,
    utcnow,
)
from ferret.core.errors import NotFoundError

ORPHANED_RUN_ERROR = "the process generating it stopped (killed or crashed); run the task again to resume it"


def run_owner() -> str:
    """``<host>:<pid>:<start>`` of this process (``process_identity``), written on the run it generates."""
    return f"{socket.gethostname()}:{process_identity()}"


def interrupt_orphaned_runs(session: Session) -> list[int]:
    """Mark interrupted the runs of this host left ``running`` by a process that is gone; returns their ids.

    Why: a killed ``ferret pipeline run`` (or worker) cannot mark its own run, which otherwise stays running for
    ever. Runs of other hosts, and runs written before owners were recorded, are left alone."""
    prefix = f"{socket.gethostname()}:"
    rows = session.execute(
        select(GenerationRun).where(
            GenerationRun.state == GenerationState.RUNNING, GenerationRun.owner.startswith(prefix)
        )
    ).scalars()
    orphaned = [run for run in rows if not process_alive(str(run.owner).removeprefix(prefix))]
    for run in orphaned:
        run.state, run.error, run.finished_at = GenerationState.INTERRUPTED, ORPHANED_RUN_ERROR, utcnow()
    return [run.id for run in orphaned]


def create_run(session: Session, task: RetrievalTask, settings: dict[str, Any]) -> GenerationRun:
    run = GenerationRun(
        task_id=task.id, state=GenerationState.RUNNING, settings=dict(settings), counters={}, owner=run_owner()
    )
    session.add(run)
    session.flush()
    return run


def get_run(session: Session, run_id: int) -> GenerationRun:
    run = session.get(GenerationRun, run_id)
    if run is None:
        raise NotFoundError(f"Generation run {run_id} does not exist.")
    return run


def list_runs(session: Session, task: RetrievalTask) -> list[GenerationRun]:
    return list(
        session.scalars(select(GenerationRun).where(GenerationRun.task_id == task.id).order_by(GenerationRun.id))
    )


def latest_run(session: Session, task: RetrievalTask) -> GenerationRun | None:
    return session.scalars(
        select(GenerationRun).where(GenerationRun.task_id == task.id).order_by(GenerationRun.id.desc()).limit(1)
    ).first()


def resumable_run(
    session: Session, task: RetrievalTask, settings: dict[str, Any], *, include_finished: bool = False
) -> GenerationRun | None:
    """The task's latest run when it did not finish (interrupted, failed, or left running by a killed process)
    and ran with the same settings; a finished run counts too with ``include_finished`` (it then only gains the
    documents added since). Otherwise a new run starts."""
    run = latest_run(session, task)
    if run is None or run.settings != settings:
        return None
    if run.state is GenerationState.SUCCEEDED and not include_finished:
        return None
    return run


def corpus_document_ids(session: Session, corpus_id: int) -> list[int]:
    return list(session.scalars(select(Document.id).where(Document.corpus_id == corpus_id).order_by(Document.id)))


def documents_by_ids(session: Session, document_ids: Sequence[int]) -> list[Document]:
    """The documents in the order of ``document_ids`` (ids that no longer exist are left out)."""
    rows = {
        document.id: document for document in session.scalars(select(Document).where(Document.id.in_(document_ids)))
    }
    return [rows[document_id] for document_id in document_ids if document_id in rows]


def document_lengths(session: Session, document_ids: Sequence[int]) -> dict[int, int]:
    """document id -> characters of its title and body, without loading them (ids that no longer exist are left out)."""
    lengths: dict[int, int] = {}
    for start in range(0, len(document_ids), 500):
        chunk = list(document_ids[start : start + 500])
        length = func.length(Document.title) + func.length(Document.body)
        rows = session.execute(select(Document.id, length).where(Document.id.in_(chunk)))
        lengths.update((document_id, int(characters or 0)) for document_id, characters in rows)
    return lengths


def document_texts(session: Session, corpus: Corpus) -> dict[int, tuple[str, str]]:
    """document id -> (title, body) of every document of a corpus."""
    rows = session.execute(select(Document.id, Document.title, Document.body).where(Document.corpus_id == corpus.id))
    return {document_id: (title, body) for document_id, title, body in rows}


def generated_document_ids(session: Session, run: GenerationRun) -> set[int]:
    """Documents that already have their queries (or failures) in ``run``."""
    return set(session.scalars(select(SyntheticQuery.document_id).where(SyntheticQuery.run_id == run.id).distinct()))


def run_queries(
    session: Session, run: GenerationRun, statuses: Sequence[QueryStatus] | None = None
) -> list[SyntheticQuery]:
    """Queries of a run in the order they were written (document by document, sample by sample)."""
    statement = select(SyntheticQuery).where(SyntheticQuery.run_id == run.id)
    if statuses is not None:
        statement = statement.where(SyntheticQuery.status.in_(list(statuses)))
    return list(session.scalars(statement.order_by(SyntheticQuery.id)))


def training_pairs(session: Session, run: GenerationRun) -> list[tuple[str, int]]:
    """(query, document id) of every query that is still usable after the filters."""
    rows = session.execute(
        select(SyntheticQuery.text, SyntheticQuery.document_id)
        .where(SyntheticQuery.run_id == run.id, SyntheticQuery.status == QueryStatus.OK)
        .order_by(SyntheticQuery.id)
    )
    return [(text, document_id) for text, document_id in rows]


def reset_drops(session: Session, run: GenerationRun) -> None:
    """Undo earlier filtering of a run: dropped queries become usable again and lose their score."""
    session.execute(
        update(SyntheticQuery)
        .where(SyntheticQuery.run_id == run.id, SyntheticQuery.status == QueryStatus.DROPPED)
        .values(status=QueryStatus.OK, reason=None)
    )
    session.execute(update(SyntheticQuery).where(SyntheticQuery.run_id == run.id).values(score=None))


def status_counts(session: Session, run: GenerationRun) -> dict[str, int]:
    rows = session.execute(
        select(SyntheticQuery.status, func.count(SyntheticQuery.id))
        .where(SyntheticQuery.run_id == run.id)
        .group_by(SyntheticQuery.status)
    )
    return {QueryStatus(status).value: count for status, count in rows}


def reason_counts(session: Session, run: GenerationRun, status: QueryStatus) -> dict[str, int]:
    """Counts by reason of the failed or dropped queries of a run; round-trip ranks grouped as 'round-trip'."""
    rows = session.scalars(
        select(SyntheticQuery.reason).where(SyntheticQuery.run_id == run.id, SyntheticQuery.status == status)
    )
    return dict(Counter((reason or "unknown").split(":")[0] for reason in rows))
