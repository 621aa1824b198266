"""Queries on corpora and their sources."""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection
from typing import Any

from sqlalchemy import String, cast, delete, func, inspect, select
from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import DEFAULT_PASSAGE_TOKENS
from ferret.core.db.models import Corpus, Document, IndexVersion, Passage, Source
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")


def validate_corpus_name(name: str) -> str:
    # The name becomes part of Qdrant collection names and shard folders, so keep it to a safe alphabet.
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS or name[0] in "-_":
        raise InvalidInputError(
            f"Corpus name {name!r} is not valid; use 1-64 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit."
        )
    return name


def get_corpus(session: Session, name: str) -> Corpus:
    corpus = session.scalar(select(Corpus).where(Corpus.name == name))
    if corpus is None:
        names = list(session.scalars(select(Corpus.name)))
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if close:
            raise NotFoundError(f"Corpus {name!r} does not exist; did you mean {close[0]!r}?")
        raise NotFoundError(
            f"Corpus {name!r} does not exist; create it with `ferret ingest --corpus {name} ...`.",
            over_http=f"Corpus {name!r} does not exist; create it with POST /v1/corpora.",
        )
    return corpus


def find_corpus(session: Session, name: str) -> Corpus | None:
    return session.scalar(select(Corpus).where(Corpus.name == name))


def list_corpora(session: Session) -> list[Corpus]:
    return list(session.scalars(select(Corpus).order_by(Corpus.name)))


def create_corpus(
    session: Session,
    name: str,
    *,
    description: str = "",
    max_passage_tokens: int = DEFAULT_PASSAGE_TOKENS,
    passage_overlap_tokens: int = 32,
) -> Corpus:
    validate_corpus_name(name)
    if find_corpus(session, name) is not None:
        raise ConflictError(f"Corpus {name!r} already exists.")
    if passage_overlap_tokens >= max_passage_tokens // 2:
        raise InvalidInputError("Passage overlap must be less than half the passage length.")
    corpus = Corpus(
        name=name,
        description=description,
        max_passage_tokens=max_passage_tokens,
        passage_overlap_tokens=passage_overlap_tokens,
    )
    session.add(corpus)
    session.flush()
    return corpus


def get_or_create_corpus(session: Session, name: str, **kwargs: Any) -> Corpus:
    return find_corpus(session, name) or create_corpus(session, name, **kwargs)


def forget_empty_corpus(session: Session, corpus: Corpus) -> bool:
    """Delete a corpus that its own first ingest created and failed to fill: no documents, no index version, no
    source, so nothing of it is left behind (its job rows stay, their corpus unset). A corpus that holds anything is
    kept; returns whether it was deleted."""
    identity = inspect(corpus).identity  # known without a load: the row may be gone already (its job removed it)
    corpus_id = identity[0] if identity else corpus.id
    session.rollback()
    empty = all(
        session.scalar(select(func.count(column)).where(column == corpus_id)) == 0
        for column in (Document.corpus_id, IndexVersion.corpus_id, Source.corpus_id)
    )
    if empty:
        session.execute(delete(Corpus).where(Corpus.id == corpus_id))
        session.commit()
    return empty


def corpus_counts(session: Session, corpus: Corpus, groups: Collection[str] | None = None) -> tuple[int, int]:
    """(documents, passages) in a corpus; with ``groups``, only those of documents shared with one of them.

    Why the groups: a count of documents a caller cannot read still tells it they exist (issue 11). Documents are
    counted per distinct group set (stored sorted, so its JSON text is its identity) and the sets are matched here,
    which is portable between SQLite and PostgreSQL and costs one row per distinct set, not per document."""
    if groups is None:
        documents = session.scalar(select(func.count(Document.id)).where(Document.corpus_id == corpus.id)) or 0
        passages = session.scalar(select(func.count(Passage.id)).where(Passage.corpus_id == corpus.id)) or 0
        return documents, passages
    group_set = cast(Document.acl_groups, String)
    by_documents = session.execute(
        select(group_set, func.count(Document.id)).where(Document.corpus_id == corpus.id).group_by(group_set)
    )
    by_passages = session.execute(
        select(group_set, func.count(Passage.id))
        .join(Document, Passage.document_id == Document.id)
        .where(Passage.corpus_id == corpus.id)
        .group_by(group_set)
    )
    wanted = set(groups)

    def visible(rows: Any) -> int:
        return sum(count for text, count in rows if wanted.intersection(json.loads(text or "[]")))

    return visible(by_documents), visible(by_passages)


def get_or_create_source(session: Session, corpus: Corpus, name: str, kind: str, config: dict[str, Any]) -> Source:
    source = session.scalar(select(Source).where(Source.corpus_id == corpus.id, Source.name == name))
    if source is None:
        source = Source(corpus_id=corpus.id, name=name, kind=kind, config=config)
        session.add(source)
        session.flush()
    elif source.kind != kind:
        raise ConflictError(f"Source {name!r} of corpus {corpus.name!r} is a {source.kind} source, not {kind}.")
    else:
        source.config = config
    return source
