"""The audit trail over HTTP, for admins: who created or revoked keys, who promoted or rolled back what."""

from __future__ import annotations

from fastapi import APIRouter, Query

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep
from ferret.api.errors import error_responses
from ferret.api.schemas import AuditEventList, AuditEventOut
from ferret.core.db.audit import list_events

router = APIRouter(tags=["audit"])


@router.get(
    "/v1/audit-events",
    response_model=AuditEventList,
    responses=error_responses(401, 403, 422),
    summary="List audit events, newest first",
)
def list_all(
    _caller: AdminCaller,
    session: SessionDep,
    limit: int = Query(default=100, ge=1, le=1000),
    action: str | None = Query(default=None, min_length=1, max_length=64, description="Only this action."),
    before_id: int | None = Query(default=None, ge=1, le=2**63 - 1, description="Page: events older than this id."),
) -> AuditEventList:
    events = list_events(session, limit=limit, action=action, before_id=before_id)
    return AuditEventList(
        events=[
            AuditEventOut(id=e.id, at=e.at, actor=e.actor, action=e.action, target=e.target, detail=e.detail)
            for e in events
        ]
    )
