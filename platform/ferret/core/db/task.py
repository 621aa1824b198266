"""Queries on retrieval tasks and their few-shot examples (Promptagator, Dai et al. 2022)."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from ferret.core.db.models import Corpus, Document, GenerationRun, RetrievalTask, TaskExample
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def validate_task_name(name: str) -> str:
    if not name or len(name) > 128 or not set(name) <= _NAME_CHARS or name[0] in "-_.":
        raise InvalidInputError(
            f"Task name {name!r} is not valid; use 1-128 lowercase letters, digits, '-', '_' or '.', "
            "starting with a letter or digit."
        )
    return name


def find_task(session: Session, name: str) -> RetrievalTask | None:
    return session.scalar(
        select(RetrievalTask).where(RetrievalTask.name == name).options(selectinload(RetrievalTask.examples))
    )


def get_task(session: Session, name: str) -> RetrievalTask:
    task = find_task(session, name)
    if task is None:
        raise NotFoundError(
            f"Task {name!r} does not exist; create it with `ferret task create` or `ferret task import FILE`.",
            over_http=f"Task {name!r} does not exist; create it with POST /v1/tasks.",
        )
    return task


def list_tasks(session: Session) -> list[RetrievalTask]:
    return list(
        session.scalars(
            select(RetrievalTask).options(selectinload(RetrievalTask.examples)).order_by(RetrievalTask.name)
        )
    )


def ensure_task_name_free(session: Session, name: str) -> None:
    if session.scalar(select(RetrievalTask.id).where(RetrievalTask.name == name)) is not None:
        raise ConflictError(
            f"Task {name!r} already exists; choose another name or delete it with `ferret task delete`.",
            over_http=f"Task {name!r} already exists; choose another name or delete it with DELETE /v1/tasks/{name}.",
        )


def add_task(session: Session, task: RetrievalTask) -> RetrievalTask:
    """Insert a fully validated task with its examples."""
    ensure_task_name_free(session, task.name)
    session.add(task)
    session.flush()
    return task


def delete_task(session: Session, task: RetrievalTask) -> None:
    """The task, its examples, its runs and their queries (database cascades)."""
    session.delete(task)
    session.flush()


def documents_by_external_ids(
    session: Session, corpus: Corpus, external_ids: Iterable[str]
) -> dict[str, list[Document]]:
    """external id -> the corpus documents with that id (one per source that has it)."""
    wanted = sorted(set(external_ids))
    found: dict[str, list[Document]] = defaultdict(list)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        rows = session.scalars(
            select(Document)
            .where(Document.corpus_id == corpus.id, Document.external_id.in_(chunk))
            .order_by(Document.source)
        )
        for document in rows:
            found[document.external_id].append(document)
    return dict(found)


def first_external_ids(session: Session, corpus: Corpus, count: int) -> list[str]:
    """The ids of the corpus's first documents, oldest first (the task template's examples)."""
    query = select(Document.external_id).where(Document.corpus_id == corpus.id).order_by(Document.id).limit(count)
    return list(session.scalars(query))


_SUGGESTION_POOL = 20_000
"""External ids compared by spelling for a suggestion; beyond this many, only extension and folder matches."""


def similar_external_ids(session: Session, corpus: Corpus, external_id: str) -> list[str]:
    """Ids of the corpus a mistyped example id probably meant: the same id with an extension or a folder
    (``leave`` → ``hr/leave.txt``) first, then ids spelled alike."""
    prefixed = session.scalars(
        select(Document.external_id)
        .where(
            Document.corpus_id == corpus.id,
            Document.external_id.like(f"{external_id}.%") | Document.external_id.like(f"%/{external_id}%"),
        )
        .order_by(func.length(Document.external_id))
        .limit(3)
    )
    found = list(dict.fromkeys(prefixed))
    if found:
        return found
    pool = list(
        session.scalars(select(Document.external_id).where(Document.corpus_id == corpus.id).limit(_SUGGESTION_POOL))
    )
    return difflib.get_close_matches(external_id, pool, n=3, cutoff=0.6)


def example_document(session: Session, task: RetrievalTask, example: TaskExample) -> Document | None:
    """The corpus document of an example: by id, else by (source, external id) after a re-ingest replaced it."""
    if example.document_id is not None:
        return session.get(Document, example.document_id)
    if example.external_id is None:
        return None
    conditions = [Document.corpus_id == task.corpus_id, Document.external_id == example.external_id]
    if example.source is not None:
        conditions.append(Document.source == example.source)
    document = session.scalars(select(Document).where(*conditions).order_by(Document.id).limit(1)).first()
    if document is not None:
        example.document_id = document.id
    return document


def task_run_counts(session: Session, tasks: Iterable[RetrievalTask]) -> dict[int, int]:
    """task id -> number of generation runs."""
    ids = [task.id for task in tasks]
    if not ids:
        return {}
    rows = session.execute(
        select(GenerationRun.task_id, func.count(GenerationRun.id))
        .where(GenerationRun.task_id.in_(ids))
        .group_by(GenerationRun.task_id)
    )
    return {task_id: count for task_id, count in rows}
