"""The Promptagator tables on a migrated SQLite database: cascades, SET NULL, CHECK constraints, uniqueness."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ferret.core.db.models import (
    Corpus,
    Document,
    GenerationRun,
    QueryStatus,
    RetrievalTask,
    SyntheticQuery,
    TaskExample,
)
from ferret.core.db.synthetic import create_run
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task


def _count(session: Session, model: type[object]) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


def _fill(session: Session) -> tuple[RetrievalTask, GenerationRun, int]:
    examples = [ExampleSpec(query="capital of France?", document="d1"), ExampleSpec(query="sugar?", document="d2")]
    task = create_task(session, TaskSpec(name="facts", corpus="facts", examples=examples))
    run = create_run(session, task, {"queries_per_doc": 1})
    document_id = session.scalars(select(Document.id).where(Document.external_id == "d3")).one()
    session.add(SyntheticQuery(run_id=run.id, document_id=document_id, sample=0, text="largest planet"))
    session.commit()
    return task, run, document_id


def test_defaults_and_uniqueness(session: Session, corpus: Corpus) -> None:
    task, run, document_id = _fill(session)
    stored = session.scalars(select(SyntheticQuery)).one()
    assert stored.status is QueryStatus.OK and stored.reason is None and stored.score is None
    assert task.e_doc == "Document" and task.e_query == "Query" and task.zero_shot is False
    assert run.state.value == "running" and run.finished_at is None
    session.add(SyntheticQuery(run_id=run.id, document_id=document_id, sample=0, text="again"))
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()


def test_cascades(session: Session, corpus: Corpus) -> None:
    _, _, document_id = _fill(session)
    session.execute(delete(Document).where(Document.id == document_id))
    session.commit()
    assert _count(session, SyntheticQuery) == 0 and _count(session, GenerationRun) == 1

    session.execute(delete(Corpus).where(Corpus.id == corpus.id))
    session.commit()
    for model in (RetrievalTask, TaskExample, GenerationRun):
        assert _count(session, model) == 0


def test_state_and_status_checks(session: Session, corpus: Corpus) -> None:
    _fill(session)
    for statement in ("UPDATE generation_runs SET state = 'bogus'", "UPDATE synthetic_queries SET status = 'bogus'"):
        with pytest.raises(IntegrityError):
            session.execute(text(statement))
        session.rollback()
