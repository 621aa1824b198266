"""The activation history of a corpus: which index version or search configuration was made active, when, by whom.

Promotion pushes a row; rollback walks the stack of rows not withdrawn back one step (v3 → v2 → v1) instead of
toggling between the last two (issue 11, item 12). The caller adds the rows in the transaction that changes what
search reads, so the history and the alias commit (or roll back) together.

Example:
    >>> record_activation(session, corpus, INDEX, 3, actor="cli:ana@host")
    >>> rollback_target(session, corpus, INDEX, is_live=lambda version: version in {1, 2})
    2
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import Activation, Corpus

INDEX = "index"
CONFIG = "config"

PROMOTE = "promote"
ROLLBACK = "rollback"


def record_activation(
    session: Session, corpus: Corpus, kind: str, version: int, *, actor: str, via: str = PROMOTE
) -> Activation:
    row = Activation(corpus_id=corpus.id, kind=kind, version=version, actor=actor[:256], via=via)
    session.add(row)
    return row


def activation_history(session: Session, corpus: Corpus, kind: str) -> list[Activation]:
    """Every activation of ``kind`` in ``corpus``, oldest first, withdrawn ones included."""
    return list(
        session.scalars(
            select(Activation).where(Activation.corpus_id == corpus.id, Activation.kind == kind).order_by(Activation.id)
        )
    )


def last_activations(session: Session, corpus: Corpus, kind: str) -> dict[int, Activation]:
    """Version number -> its most recent activation (when and by whom it last became active)."""
    return {row.version: row for row in activation_history(session, corpus, kind)}


def history_line(history: list[Activation], *, prefix: str = "v") -> str:
    """The history in one line, as ``ferret index list`` and ``ferret config list`` print it below their table:
    ``v1 (promote), v2 (promote), v1 (rollback)``."""
    return ", ".join(f"{prefix}{row.version} ({row.via})" for row in history)


def rollback_target(session: Session, corpus: Corpus, kind: str, *, is_live: Callable[[int], bool]) -> int | None:
    """The version a rollback re-activates, or None when nothing earlier is left.

    The stack's top is the current activation; below it, activations of versions that can no longer serve
    (``is_live`` false: retired, failed, deleted) are passed over. When a target is found, the rows from it up are
    withdrawn (the caller then activates it again with ``via`` ``rollback``, which pushes its new row); when none is,
    nothing changes."""
    stack = [row for row in activation_history(session, corpus, kind) if not row.withdrawn]
    below = stack[:-1]
    while below and not is_live(below[-1].version):
        below.pop()
    if not below:
        return None
    for row in stack[len(below) - 1 :]:
        row.withdrawn = True
    return below[-1].version
