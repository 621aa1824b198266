"""Configured sources over HTTP (admin): add one (after the same access check as ``ferret source add``), list them
with their last sync report, read a source's sync reports, and sync one now. A definition's secrets are references
(``{env: NAME}``, ``{file: PATH}``) that the server's own environment resolves, never plain text."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query, status
from pydantic import BaseModel, Field

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.schemas import ApiRequest, JsonObject
from ferret.core.db.corpus import get_corpus
from ferret.core.db.models import Source
from ferret.core.db.source import last_sync_run, list_sources, run_summary, sync_runs
from ferret.core.sources.config import parse_spec
from ferret.core.sources.service import add_source, find_configured, sync_source

router = APIRouter(tags=["sources"])


class SyncReportOut(BaseModel):
    """One sync: state, counts (new, changed, unchanged, deleted, permission_updates, skipped, passages_embedded,
    checkpoints, duration_s), skipped items with their reasons, the error that stopped it."""

    id: int
    state: str
    trigger: str
    counts: dict[str, Any]
    skipped: list[dict[str, str]]
    error: str | None
    started_at: str
    finished_at: str | None
    duration_s: float | None


class SourceOut(BaseModel):
    corpus: str
    name: str
    kind: str
    enabled: bool
    schedule_minutes: int | None
    last_sync: SyncReportOut | None


class SourceList(BaseModel):
    sources: list[SourceOut]


def _out(session: Any, source: Source, corpus: str) -> SourceOut:
    last = last_sync_run(session, source)
    return SourceOut(
        corpus=corpus,
        name=source.name,
        kind=source.kind,
        enabled=source.enabled,
        schedule_minutes=source.schedule_minutes,
        last_sync=SyncReportOut(**run_summary(last)) if last is not None else None,
    )


class SourceIn(ApiRequest):
    """A source definition as ``ferret source add`` reads it from a file, less the corpus (the path names it)."""

    name: str = Field(min_length=1, max_length=64)
    kind: str = Field(min_length=1, max_length=64)
    config: JsonObject = Field(default_factory=dict)
    schedule_minutes: int | None = Field(default=None, ge=1, le=60 * 24 * 31)
    enabled: bool = True


@router.post(
    "/v1/corpora/{corpus}/sources",
    response_model=SourceOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 409, 413, 422),
    summary="Add (or replace) a source after checking that it can be read",
)
def add(
    body: SourceIn,
    _caller: AdminCaller,
    session: SessionDep,
    state: StateDep,
    corpus: str = Path(max_length=128),
    replace: bool = Query(False, description="Replace the definition of an existing source of that name."),
    check: bool = Query(
        True,
        description="Read the source once before storing it (the bucket, share, table and columns, repository and "
        "branch, or start page); false stores it unchecked, e.g. before its store is reachable.",
    ),
) -> SourceOut:
    """A source refused by its access check answers 422 with the connector's sentence, and nothing is stored."""
    spec = parse_spec({"corpus": corpus, **body.model_dump()}, "The source definition")
    source = add_source(session, spec, state.connectors, replace=replace, check=check)
    session.commit()
    return _out(session, source, spec.corpus)


@router.get(
    "/v1/corpora/{corpus}/sources",
    response_model=SourceList,
    responses=error_responses(401, 403, 404),
    summary="List the configured sources of a corpus with their last sync report",
)
def list_all(_caller: AdminCaller, session: SessionDep, corpus: str = Path(max_length=128)) -> SourceList:
    corpus_row = get_corpus(session, corpus)
    return SourceList(sources=[_out(session, source, corpus_row.name) for source in list_sources(session, corpus_row)])


@router.get(
    "/v1/corpora/{corpus}/sources/{name}/syncs",
    response_model=list[SyncReportOut],
    responses=error_responses(401, 403, 404),
    summary="The newest sync reports of a source",
)
def syncs(
    _caller: AdminCaller,
    session: SessionDep,
    corpus: str = Path(max_length=128),
    name: str = Path(max_length=64),
    limit: int = Query(20, ge=1, le=200),
) -> list[SyncReportOut]:
    source = find_configured(session, corpus, name)
    return [SyncReportOut(**run_summary(run)) for run in sync_runs(session, source, limit)]


@router.post(
    "/v1/corpora/{corpus}/sources/{name}/sync",
    response_model=SyncReportOut,
    responses=error_responses(401, 403, 404, 409, 422),
    summary="Sync a source now and return its report",
)
def sync_now(
    _caller: AdminCaller,
    session: SessionDep,
    state: StateDep,
    corpus: str = Path(max_length=128),
    name: str = Path(max_length=64),
    full: bool = Query(False, description="Read every document from the start instead of from the checkpoint."),
) -> SyncReportOut:
    """Runs the sync in the request (resuming from the source's last checkpoint, or from the start with
    ``full=true``); a failed sync answers 400 with its one-sentence reason, and its report (state failed) is listed
    by the syncs route."""
    source = find_configured(session, corpus, name)
    run = sync_source(session, state.settings, state.backend, state.connectors, source, trigger="api", full=full)
    return SyncReportOut(**run_summary(run))
