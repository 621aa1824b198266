"""``add_source`` as the faces call it, for the connectors' access-check tests: a source whose check passes is
stored; one whose check fails is refused with its sentence and leaves the sources (and corpora) table unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.connectors.registry import build_connector
from ferret.core.db.models import Corpus, Source
from ferret.core.errors import FerretError
from ferret.core.sources.config import parse_spec
from ferret.core.sources.service import add_source


def spec_of(kind: str, config: dict[str, Any], name: str = "checked") -> Any:
    return parse_spec({"corpus": "access", "name": name, "kind": kind, "config": config})


def added(session: Session, kind: str, config: dict[str, Any], name: str = "checked") -> Source:
    """Add the source with its access check; it must pass and be stored."""
    source = add_source(session, spec_of(kind, config, name), build_connector)
    session.commit()
    assert session.scalar(select(Source).where(Source.name == name)) is source
    return source


def refused(session: Session, kind: str, config: dict[str, Any], match: str, *, replace: bool = False) -> str:
    """Add the source with its access check; it must fail with a sentence matching ``match`` (which also says that
    nothing was stored) and leave every source row and corpus as they were. Returns the sentence."""
    before = _rows(session)
    with pytest.raises(FerretError, match=match) as failure:
        add_source(session, spec_of(kind, config), build_connector, replace=replace)
    assert _rows(session) == before  # before any rollback: nothing was even added to the session (autoflush)
    session.rollback()
    message = str(failure.value)
    assert message.endswith("; nothing was stored (`--no-check` stores the source without this check).")
    assert failure.value.for_http.endswith("(check=false stores the source without this check).")
    return message


def _rows(session: Session) -> tuple[list[tuple[Any, ...]], int]:
    session.expire_all()
    sources = [(row.name, row.kind, row.config, row.checkpoint) for row in session.scalars(select(Source))]
    return sources, int(session.scalar(select(func.count(Corpus.id))) or 0)
