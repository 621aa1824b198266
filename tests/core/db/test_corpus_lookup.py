"""A misspelled corpus name gets a suggestion (issue 11, item 13)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from ferret.core.db import migrate
from ferret.core.db.corpus import create_corpus, get_corpus
from ferret.core.db.engine import get_engine, session_scope
from ferret.core.errors import NotFoundError


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    """A session on this folder's database (SQLite, and PostgreSQL when the integration mark runs)."""
    migrate.upgrade(database_url)
    with session_scope(database_url) as db_session:
        yield db_session
    get_engine(database_url).dispose()


def test_a_misspelled_corpus_gets_a_did_you_mean(session: Session) -> None:
    create_corpus(session, "handbook")
    create_corpus(session, "scifact")
    with pytest.raises(NotFoundError, match=r"^Corpus 'handbok' does not exist; did you mean 'handbook'\?$"):
        get_corpus(session, "handbok")
    with pytest.raises(NotFoundError, match=r"create it with `ferret ingest --corpus zzz \.\.\.`"):
        get_corpus(session, "zzz")
