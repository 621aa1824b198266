"""The audit trail: who created or revoked API keys, who promoted or rolled back index versions and search
configurations.

Events are added in the caller's transaction, so an action and its record commit (or roll back) together.

Example:
    >>> record_event(session, cli_actor(), "index.promote", "kb", {"version": 3})
"""

from __future__ import annotations

import getpass
import socket
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import AuditEvent

SYSTEM_ACTOR = "system"
"""Ferret itself, e.g. replacing an index version that can no longer be loaded."""


def local_actor(face: str) -> str:
    """``<face>:<user>@<host>``: someone at this machine (the database has no other identity for them)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        user = "unknown"
    return f"{face}:{user}@{socket.gethostname()}"[:256]


def cli_actor() -> str:
    return local_actor("cli")


def key_actor(key_name: str) -> str:
    return f"key:{key_name}"[:256]


def record_event(
    session: Session, actor: str, action: str, target: str, detail: dict[str, Any] | None = None
) -> AuditEvent:
    event = AuditEvent(actor=actor[:256], action=action[:64], target=target[:256], detail=dict(detail or {}))
    session.add(event)
    return event


def list_events(
    session: Session, *, limit: int = 100, action: str | None = None, before_id: int | None = None
) -> list[AuditEvent]:
    """Newest first; ``before_id`` pages further back."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if action is not None:
        query = query.where(AuditEvent.action == action)
    if before_id is not None:
        query = query.where(AuditEvent.id < before_id)
    return list(session.scalars(query))
