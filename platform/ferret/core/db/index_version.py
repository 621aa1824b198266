"""Queries on index versions: the database record of every collection (server) or shard (embedded)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, IndexState, IndexVersion, ModelVersion
from ferret.core.errors import NotFoundError

LIVE_STATES = (IndexState.READY, IndexState.ACTIVE)
"""Versions whose collection exists and is kept in sync with the corpus."""


def create_index_version(session: Session, corpus: Corpus, model: ModelVersion, backend: str) -> IndexVersion:
    number = (
        session.scalar(select(func.max(IndexVersion.version)).where(IndexVersion.corpus_id == corpus.id)) or 0
    ) + 1
    index_version = IndexVersion(
        corpus_id=corpus.id,
        model_version_id=model.id,
        version=number,
        collection=f"{corpus.name}__v{number}",
        backend=backend,
        state=IndexState.BUILDING,
    )
    session.add(index_version)
    session.flush()
    return index_version


def list_index_versions(session: Session, corpus: Corpus) -> list[IndexVersion]:
    return list(
        session.scalars(select(IndexVersion).where(IndexVersion.corpus_id == corpus.id).order_by(IndexVersion.version))
    )


def get_index_version(session: Session, corpus: Corpus, version: int) -> IndexVersion:
    index_version = session.scalar(
        select(IndexVersion).where(IndexVersion.corpus_id == corpus.id, IndexVersion.version == version)
    )
    if index_version is None:
        raise NotFoundError(f"Corpus {corpus.name!r} has no index version {version}.")
    return index_version


def active_index_version(session: Session, corpus: Corpus) -> IndexVersion | None:
    return session.scalar(
        select(IndexVersion).where(IndexVersion.corpus_id == corpus.id, IndexVersion.state == IndexState.ACTIVE)
    )


def live_index_versions(session: Session, corpus: Corpus) -> list[IndexVersion]:
    return list(
        session.scalars(
            select(IndexVersion)
            .where(IndexVersion.corpus_id == corpus.id, IndexVersion.state.in_(LIVE_STATES))
            .order_by(IndexVersion.version)
        )
    )


def plain_index_versions(session: Session, corpus: Corpus, model: ModelVersion) -> list[IndexVersion]:
    """The live versions ``model`` built of the corpus without document expansion, oldest first: the index a
    configuration naming only the model searches. An expanded version is found only by the configuration naming it
    (``SearchConfig.index_version``)."""
    return [v for v in live_index_versions(session, corpus) if v.model_version_id == model.id and v.expansion is None]


def find_index_version_by_collection(session: Session, collection: str) -> IndexVersion | None:
    return session.scalar(select(IndexVersion).where(IndexVersion.collection == collection))
