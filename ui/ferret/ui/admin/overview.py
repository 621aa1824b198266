"""What the admin page shows, read in one session into plain frozen records.

The page renders these records only, so it never touches a SQLAlchemy object after its session closed, and the
reading is testable without Streamlit.

Example:
    >>> with app_context() as context:
    ...     overview = load_overview(context.session)
    >>> [corpus.name for corpus in overview.corpora]
    ['handbook']
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.corpus import corpus_counts, list_corpora
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.job import list_jobs
from ferret.core.db.models import Corpus, IndexState, IndexVersion, Source
from ferret.core.db.task import list_tasks, task_run_counts

JOB_LIMIT = 50
"""Newest jobs shown on the page."""
STALE_SOURCE_AFTER = timedelta(days=7)
"""A source not synced for this long gets a warning."""


@dataclass(frozen=True)
class IndexVersionRow:
    """One index version of a corpus: a Qdrant collection embedded by one model version."""

    version: int
    collection: str
    state: IndexState
    model: str
    passages: int
    points: int
    created_at: datetime
    activated_at: datetime | None
    error: str | None

    @property
    def is_active(self) -> bool:
        return self.state == IndexState.ACTIVE

    @property
    def can_promote(self) -> bool:
        """Only a complete, ready version can become the one search reads."""
        return self.state == IndexState.READY


@dataclass(frozen=True)
class CorpusOverview:
    name: str
    description: str
    documents: int
    passages: int
    versions: tuple[IndexVersionRow, ...]

    @property
    def active(self) -> IndexVersionRow | None:
        return next((row for row in self.versions if row.is_active), None)

    @property
    def can_roll_back(self) -> bool:
        """Mirrors ``VersionedCollection.rollback``: a ready version that was active before."""
        return any(row.can_promote and row.activated_at is not None for row in self.versions)


@dataclass(frozen=True)
class TaskRow:
    name: str
    corpus: str
    description: str
    examples: int
    zero_shot: bool
    generation_runs: int
    created_at: datetime


@dataclass(frozen=True)
class JobRow:
    id: int
    kind: str
    corpus: str | None
    state: str
    stage: str
    progress: float
    error: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class SourceRow:
    corpus: str
    name: str
    kind: str
    last_run_at: datetime | None


@dataclass(frozen=True)
class AdminOverview:
    corpora: tuple[CorpusOverview, ...]
    tasks: tuple[TaskRow, ...]
    jobs: tuple[JobRow, ...]
    sources: tuple[SourceRow, ...] = ()

    def warnings(self, *, now: datetime, stale_after: timedelta = STALE_SOURCE_AFTER) -> list[str]:
        """One sentence per thing an admin should look at: failed jobs that no later job of the same kind on the same
        corpus has since done (a retry, a fixed rerun), sources not synced for a while."""
        done_after: dict[tuple[str, str | None], int] = {}  # (kind, corpus) -> the newest succeeded job's id
        for job in self.jobs:
            if job.state == "succeeded":
                done_after[(job.kind, job.corpus)] = max(job.id, done_after.get((job.kind, job.corpus), 0))
        found = [
            f"Job {job.id} ({job.kind}{f' of {job.corpus}' if job.corpus else ''}) failed: {job.error or 'no error'}"
            for job in self.jobs
            if job.state == "failed" and done_after.get((job.kind, job.corpus), 0) < job.id
        ]
        for source in self.sources:
            if source.last_run_at is None or _utc(now) - _utc(source.last_run_at) > stale_after:
                last = source.last_run_at.strftime("%Y-%m-%d") if source.last_run_at else "never"
                found.append(f"Source {source.name} of {source.corpus} is stale (last sync: {last}).")
        return found


def _utc(moment: datetime) -> datetime:
    """Naive datetimes are UTC (SQLite hands them back without a zone)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _version_row(index_version: IndexVersion) -> IndexVersionRow:
    return IndexVersionRow(
        version=index_version.version,
        collection=index_version.collection,
        state=index_version.state,
        model=index_version.model_version.name + (" + expansion" if index_version.expansion is not None else ""),
        passages=index_version.passage_count,
        points=index_version.point_count,
        created_at=index_version.created_at,
        activated_at=index_version.activated_at,
        error=index_version.error,
    )


def _corpus_overview(session: Session, corpus: Corpus) -> CorpusOverview:
    documents, passages = corpus_counts(session, corpus)
    versions = tuple(_version_row(v) for v in reversed(list_index_versions(session, corpus)))  # newest first
    return CorpusOverview(corpus.name, corpus.description, documents, passages, versions)


def load_overview(session: Session, *, job_limit: int = JOB_LIMIT) -> AdminOverview:
    """Corpora with their index versions (newest first), tasks, and the newest ``job_limit`` jobs."""
    corpora = list_corpora(session)
    corpus_names = {corpus.id: corpus.name for corpus in corpora}
    tasks = list_tasks(session)
    runs = task_run_counts(session, tasks)
    return AdminOverview(
        corpora=tuple(_corpus_overview(session, corpus) for corpus in corpora),
        tasks=tuple(
            TaskRow(
                name=task.name,
                corpus=corpus_names.get(task.corpus_id, "?"),
                description=task.description,
                examples=len(task.examples),
                zero_shot=task.zero_shot,
                generation_runs=runs.get(task.id, 0),
                created_at=task.created_at,
            )
            for task in tasks
        ),
        jobs=tuple(
            JobRow(
                id=job.id,
                kind=job.kind,
                corpus=corpus_names.get(job.corpus_id) if job.corpus_id is not None else None,
                state=job.state.value,
                stage=job.stage,
                progress=job.progress,
                error=job.error,
                created_at=job.created_at,
                finished_at=job.finished_at,
            )
            for job in list_jobs(session, limit=job_limit)
        ),
        sources=tuple(
            SourceRow(corpus_names.get(source.corpus_id, "?"), source.name, source.kind, source.last_run_at)
            for source in session.scalars(select(Source).order_by(Source.corpus_id, Source.name))
        ),
    )
