"""The models on a migrated database: rows go in through the ORM; the database enforces cascades, CHECKs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import DEFAULT_PASSAGE_TOKENS
from ferret.core.db import migrate
from ferret.core.db.engine import get_engine
from ferret.core.db.models import (
    Corpus,
    Document,
    IndexState,
    IndexVersion,
    Job,
    JobState,
    ModelVersion,
    Passage,
)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    migrate.upgrade(database_url)
    engine = get_engine(database_url)  # The application's engine: SQLite foreign keys on.
    yield engine
    engine.dispose()
    get_engine.cache_clear()


def _count(session: Session, model: type[object]) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


def _fill(session: Session) -> tuple[Corpus, Document, Job, IndexVersion]:
    corpus = Corpus(name="handbook", description="Employee handbook")
    model = ModelVersion(name="minilm-base", path="/models/minilm", dimension=384)
    session.add_all([corpus, model])
    session.flush()
    document = Document(
        corpus=corpus,
        source="filesystem",
        external_id="handbook/leave.md",
        title="Leave",
        body="Annual leave is 25 days.",
        meta={"path": "handbook/leave.md"},
        acl_groups=["staff"],
        content_hash="0" * 64,
        passages=[
            Passage(corpus_id=corpus.id, ordinal=0, text="Leave. Annual leave", token_count=4),
            Passage(corpus_id=corpus.id, ordinal=1, text="is 25 days.", token_count=4),
        ],
    )
    index = IndexVersion(corpus=corpus, model_version=model, version=1, collection="handbook__v1", backend="embedded")
    job = Job(kind="index_build", corpus_id=corpus.id, params={"version": 1})
    session.add_all([document, index, job])
    session.commit()
    return corpus, document, job, index


def test_rows_round_trip_with_defaults(engine: Engine) -> None:
    with Session(engine, expire_on_commit=False) as session:
        corpus, document, job, index = _fill(session)
    with Session(engine) as session:
        stored = session.get_one(Document, document.id)
        assert stored.meta == {"path": "handbook/leave.md"}
        assert stored.acl_groups == ["staff"]
        assert [passage.ordinal for passage in stored.passages] == [0, 1]
        assert session.get_one(Corpus, corpus.id).max_passage_tokens == DEFAULT_PASSAGE_TOKENS
        assert session.get_one(Job, job.id).state is JobState.QUEUED
        assert session.get_one(IndexVersion, index.id).state is IndexState.BUILDING


def test_database_cascades(engine: Engine) -> None:
    # Plain DELETE statements, not the ORM's cascade: the ON DELETE rules of the migration do the work.
    with Session(engine, expire_on_commit=False) as session:
        corpus, document, job, _ = _fill(session)
        session.execute(delete(Document).where(Document.id == document.id))
        session.commit()
        assert _count(session, Passage) == 0

        session.execute(delete(Corpus).where(Corpus.id == corpus.id))
        session.commit()
        assert _count(session, IndexVersion) == 0
        assert session.scalar(select(Job.corpus_id).where(Job.id == job.id)) is None
        assert _count(session, ModelVersion) == 1


@pytest.mark.parametrize("table", ["jobs", "index_versions"])
def test_state_check_rejects_unknown_values(engine: Engine, table: str) -> None:
    with Session(engine) as session:
        _fill(session)
        with pytest.raises(IntegrityError):
            session.execute(text(f"UPDATE {table} SET state = 'bogus'"))
            session.flush()


def test_corpus_counts_within_groups_on_both_databases(engine: Engine) -> None:
    # The JSON group sets are grouped by their text, which both SQLite and PostgreSQL (json has no equality) allow.
    from ferret.core.db.corpus import corpus_counts

    with Session(engine) as session:
        corpus, _, _, _ = _fill(session)
        session.add(
            Document(
                corpus=corpus,
                source="filesystem",
                external_id="board/minutes.md",
                body="Minutes.",
                acl_groups=["board", "staff"],
                content_hash="1" * 64,
                passages=[Passage(corpus_id=corpus.id, ordinal=0, text="Minutes.", token_count=2)],
            )
        )
        session.flush()
        assert corpus_counts(session, corpus) == (2, 3)
        assert corpus_counts(session, corpus, ["staff", "public"]) == (2, 3)
        assert corpus_counts(session, corpus, ["board"]) == (1, 1)
        assert corpus_counts(session, corpus, ["public"]) == (0, 0)
