"""Queries on search configurations (``SearchConfig``): create, list, find the active one, switch it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, IndexVersion, ModelVersion, SearchConfig, utcnow
from ferret.core.errors import NotFoundError


def create_search_config(
    session: Session,
    corpus: Corpus,
    retriever: ModelVersion,
    fusion: dict[str, Any],
    *,
    reranker: ModelVersion | None = None,
    rerank_depth: int = 0,
    rerank_weight: float = 0.5,
    evidence: dict[str, Any] | None = None,
    note: str = "",
    index_version: IndexVersion | None = None,
) -> SearchConfig:
    number = (
        session.scalar(select(func.max(SearchConfig.version)).where(SearchConfig.corpus_id == corpus.id)) or 0
    ) + 1
    config = SearchConfig(
        corpus_id=corpus.id,
        version=number,
        retriever_id=retriever.id,
        retriever_name=retriever.name,
        fusion=dict(fusion),
        reranker_id=reranker.id if reranker is not None else None,
        reranker_name=reranker.name if reranker is not None else None,
        rerank_depth=rerank_depth if reranker is not None else 0,
        rerank_weight=rerank_weight,
        index_version_id=index_version.id if index_version is not None else None,
        active=False,
        evidence=dict(evidence or {}),
        note=note,
    )
    session.add(config)
    session.flush()
    return config


def list_search_configs(session: Session, corpus: Corpus) -> list[SearchConfig]:
    return list(
        session.scalars(select(SearchConfig).where(SearchConfig.corpus_id == corpus.id).order_by(SearchConfig.version))
    )


def get_search_config(session: Session, corpus: Corpus, version: int) -> SearchConfig:
    config = session.scalar(
        select(SearchConfig).where(SearchConfig.corpus_id == corpus.id, SearchConfig.version == version)
    )
    if config is None:
        raise NotFoundError(f"Corpus {corpus.name!r} has no search configuration {version}.")
    return config


def active_search_config(session: Session, corpus: Corpus) -> SearchConfig | None:
    return session.scalar(
        select(SearchConfig).where(SearchConfig.corpus_id == corpus.id, SearchConfig.active.is_(True))
    )


def mark_active(session: Session, config: SearchConfig) -> None:
    """Make ``config`` the corpus's only active configuration (the caller commits)."""
    for other in session.scalars(
        select(SearchConfig).where(SearchConfig.corpus_id == config.corpus_id, SearchConfig.active.is_(True))
    ):
        other.active = False
    config.active = True
    config.activated_at = utcnow()
