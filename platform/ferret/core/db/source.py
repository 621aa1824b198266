"""Queries on configured sources, their sync runs and the group memberships they report."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import String, cast, delete, func, select
from sqlalchemy.orm import Session

from ferret.core.db.job import process_alive
from ferret.core.db.models import Corpus, Document, GroupMember, Source, SyncRun, SyncState, utcnow
from ferret.core.db.synthetic import run_owner
from ferret.core.errors import ConflictError, NotFoundError

SYNC_PRESUMED_ALIVE = timedelta(hours=6)
"""How long a running sync of another host (a worker's) counts as going: its process cannot be checked from here."""
INTERRUPTED_SYNC_ERROR = (
    "interrupted: the sync stopped before it finished (its process was killed or crashed); the next sync resumes "
    "from its last checkpoint"
)

MAX_GROUP_DEPTH = 8
"""Nested groups are followed this many levels when a caller's principals are expanded (cycles stop earlier)."""


def find_source(session: Session, corpus: Corpus, name: str) -> Source | None:
    return session.scalar(select(Source).where(Source.corpus_id == corpus.id, Source.name == name))


def get_source(session: Session, corpus: Corpus, name: str) -> Source:
    source = find_source(session, corpus, name)
    if source is None:
        missing = f"Corpus {corpus.name!r} has no source {name!r}"
        raise NotFoundError(
            f"{missing}; `ferret source list` shows the configured ones.",
            over_http=f"{missing}; GET /v1/corpora/{corpus.name}/sources lists the configured ones.",
        )
    return source


def list_sources(session: Session, corpus: Corpus | None = None) -> list[Source]:
    query = select(Source).order_by(Source.corpus_id, Source.name)
    if corpus is not None:
        query = query.where(Source.corpus_id == corpus.id)
    return list(session.scalars(query))


def document_fingerprints(session: Session, corpus: Corpus, source: str) -> dict[str, tuple[int, str, list[str]]]:
    """external id -> (document id, content hash, principals) of one source, without loading bodies."""
    rows = session.execute(
        select(Document.external_id, Document.id, Document.content_hash, Document.acl_groups).where(
            Document.corpus_id == corpus.id, Document.source == source
        )
    )
    return {external_id: (document_id, digest, list(acl)) for external_id, document_id, digest, acl in rows}


def start_sync_run(session: Session, source: Source, trigger: str) -> SyncRun:
    """A new run row, owned by this process. A sync of the source still going (``sync_run_alive``) is refused in
    one sentence: two syncs of one source race on its checkpoint. Runs left marked running by a process that is
    gone (killed, crashed) are closed as failed, and this run resumes from the cursor they persisted."""
    for running in session.scalars(
        select(SyncRun).where(SyncRun.source_id == source.id, SyncRun.state == SyncState.RUNNING)
    ):
        if sync_run_alive(running):
            started = _aware(running.started_at).strftime("%Y-%m-%d %H:%M UTC")
            raise ConflictError(
                f"Source {source.name!r} is already syncing (sync run {running.id}, started {started} by "
                f"{running.trigger}); wait for it to finish."
            )
        _close_interrupted(running)
    run = SyncRun(source_id=source.id, trigger=trigger, counts={}, skipped=[], owner=run_owner())
    session.add(run)
    session.flush()
    return run


def sync_run_alive(run: SyncRun, now: datetime | None = None) -> bool:
    """Whether a run marked running is still going. A run of this host is going while its process lives; one of
    another host (or written before owners were kept) counts as going for ``SYNC_PRESUMED_ALIVE`` from its start."""
    if run.state != SyncState.RUNNING:
        return False
    host, _, identity = (run.owner or "").partition(":")
    if host == socket.gethostname():
        return process_alive(identity)
    return (now or datetime.now(UTC)) - _aware(run.started_at) < SYNC_PRESUMED_ALIVE


def close_orphaned_sync_runs(session: Session) -> list[int]:
    """Mark failed the runs of this host left running by a process that is gone; returns their ids. Without it a
    killed sync read "running" in ``ferret source list`` until the next sync of its source."""
    prefix = f"{socket.gethostname()}:"
    rows = session.scalars(select(SyncRun).where(SyncRun.state == SyncState.RUNNING, SyncRun.owner.startswith(prefix)))
    orphaned = [run for run in rows if not sync_run_alive(run)]
    for run in orphaned:
        _close_interrupted(run)
    return [run.id for run in orphaned]


def _close_interrupted(run: SyncRun) -> None:
    run.state, run.error, run.finished_at = SyncState.FAILED, INTERRUPTED_SYNC_ERROR, utcnow()


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def source_document_counts(session: Session) -> dict[tuple[int, str], int]:
    """(corpus id, source name) -> how many documents that source holds, in one query."""
    rows = session.execute(
        select(Document.corpus_id, Document.source, func.count()).group_by(Document.corpus_id, Document.source)
    )
    return {(corpus_id, source): count for corpus_id, source, count in rows}


def sync_runs(session: Session, source: Source, limit: int = 20) -> list[SyncRun]:
    return list(
        session.scalars(select(SyncRun).where(SyncRun.source_id == source.id).order_by(SyncRun.id.desc()).limit(limit))
    )


def last_sync_run(session: Session, source: Source) -> SyncRun | None:
    runs = sync_runs(session, source, limit=1)
    return runs[0] if runs else None


def replace_group_members(session: Session, source: Source, memberships: Iterable[tuple[str, str]]) -> int:
    """The source's memberships become exactly ``memberships`` ((group, member) pairs); returns how many changed."""
    wanted = set(memberships)
    existing = {
        (row.group_principal, row.member): row
        for row in session.scalars(select(GroupMember).where(GroupMember.source_id == source.id))
    }
    for pair in set(existing) - wanted:
        session.delete(existing[pair])
    for group, member in sorted(wanted - set(existing)):
        session.add(GroupMember(source_id=source.id, group_principal=group, member=member))
    session.flush()
    return len(set(existing) ^ wanted)


def delete_group_members(session: Session, source: Source) -> None:
    session.execute(delete(GroupMember).where(GroupMember.source_id == source.id))


def expand_principals(session: Session, principals: Sequence[str]) -> list[str]:
    """The principals plus every group they belong to, transitively (up to ``MAX_GROUP_DEPTH`` levels), as the
    sources reported: an API key for ``user:ann@corp.example`` also searches as ``wiki:group:eng`` when the wiki
    said Ann is in eng. Groups nobody reported add nothing."""
    found = set(principals)
    frontier = set(principals)
    for _ in range(MAX_GROUP_DEPTH):
        if not frontier:
            break
        groups = set(
            session.scalars(select(GroupMember.group_principal).where(GroupMember.member.in_(sorted(frontier))))
        )
        frontier = groups - found
        found |= groups
    return sorted(found)


def scoped_groups_named(session: Session, name: str, limit: int = 5) -> list[str]:
    """The source-scoped groups ``<source>:group:<name>`` stored anywhere (documents' groups, reported memberships)
    when ``name`` itself is stored nowhere: what ``ferret search --group hr`` most likely meant (a bare ``hr``
    matches no document of a configured source). Empty when ``name`` holds a ``:`` or is stored as given."""
    if ":" in name or not name:
        return []
    as_text = cast(Document.acl_groups, String)
    if session.scalar(select(Document.id).where(as_text.like(f'%"{name}"%')).limit(1)) is not None:
        return []  # an element "name" of a JSON list (a LIKE wildcard in the name can only suppress the hint)
    if session.scalar(select(GroupMember.id).where(GroupMember.group_principal == name).limit(1)) is not None:
        return []
    suffix = f":group:{name}"
    found = {
        group
        for groups in session.scalars(select(Document.acl_groups).where(as_text.like(f'%{suffix}"%')).limit(1000))
        for group in groups
        if group.endswith(suffix)
    }
    found |= {
        group
        for group in session.scalars(
            select(GroupMember.group_principal).where(GroupMember.group_principal.like(f"%{suffix}")).distinct()
        )
        if group.endswith(suffix)
    }
    return sorted(found)[:limit]


def _naive(moment: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes, PostgreSQL aware ones: compare them as naive UTC."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def run_summary(run: SyncRun | None) -> dict[str, Any]:
    """A run as plain JSON for the CLI and the API."""
    if run is None:
        return {}
    duration = (_naive(run.finished_at) - _naive(run.started_at)).total_seconds() if run.finished_at else None
    return {
        "id": run.id,
        "state": run.state.value,
        "trigger": run.trigger,
        "counts": dict(run.counts),
        "skipped": list(run.skipped),
        "error": run.error,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "duration_s": round(duration, 3) if duration is not None else None,
    }


def document_permissions(
    session: Session, corpus: Corpus, source: str, external_ids: Sequence[str]
) -> dict[str, tuple[list[str], datetime | None]]:
    """external id -> (principals, the source's modification time) for the given ids of one source (a push batch)."""
    found: dict[str, tuple[list[str], datetime | None]] = {}
    wanted = sorted(set(external_ids))
    for start in range(0, len(wanted), 500):
        rows = session.execute(
            select(Document.external_id, Document.acl_groups, Document.source_updated_at).where(
                Document.corpus_id == corpus.id,
                Document.source == source,
                Document.external_id.in_(wanted[start : start + 500]),
            )
        )
        for external_id, acl, updated_at in rows:
            found[external_id] = (list(acl), updated_at)
    return found
