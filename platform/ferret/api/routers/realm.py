"""REALM pre-training over HTTP: start it on a corpus, follow its retrieval utility, staleness and guard verdict.

The same job as ``ferret realm pretrain | status``, through the runtime's job queue (Celery's gpu queue when a
broker is configured, a thread of this process in embedded mode); cancelling is ``POST /v1/jobs/{id}/cancel``.
Admin scope, like every route that starts training.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal

from fastapi import APIRouter, Path, Query, status
from pydantic import BaseModel, Field

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.routers.jobs import job_out
from ferret.api.schemas import ApiRequest, JobOut, Timestamp
from ferret.core.db.corpus import get_corpus
from ferret.core.db.job import get_job, list_jobs
from ferret.core.db.models import Job, JobState
from ferret.core.errors import NotFoundError
from ferret.core.pipeline.realm.state import JOB_REALM
from ferret.core.realm.config import RealmConfig

router = APIRouter(tags=["realm"])
_DEFAULTS = RealmConfig()


class RealmConfigIn(ApiRequest):
    """``ferret.core.realm.config.RealmConfig`` with bounds (a test keeps the fields in step; ``device`` is the
    worker's business)."""

    steps: int = Field(default=_DEFAULTS.steps, ge=1, le=1_000_000)
    k: int | None = Field(default=None, ge=1, le=64, description="Passages per sentence; default 8 GPU / 4 CPU.")
    batch_size: int = Field(default=_DEFAULTS.batch_size, ge=1, le=4096)
    masking: Literal["salient", "random_token", "random_span"] = _DEFAULTS.masking
    retriever_learning_rate: float = Field(default=_DEFAULTS.retriever_learning_rate, gt=0.0, le=1.0)
    reader_learning_rate: float = Field(default=_DEFAULTS.reader_learning_rate, gt=0.0, le=1.0)
    mlm_warmup_steps: int = Field(default=_DEFAULTS.mlm_warmup_steps, ge=0, le=1_000_000)
    warmup_batch_size: int = Field(default=_DEFAULTS.warmup_batch_size, ge=1, le=4096)
    ict_warmup_steps: int = Field(default=_DEFAULTS.ict_warmup_steps, ge=0, le=1_000_000)
    refresh_every: int = Field(default=_DEFAULTS.refresh_every, ge=1)
    eval_every: int = Field(default=_DEFAULTS.eval_every, ge=1)
    checkpoint_every: int = Field(default=_DEFAULTS.checkpoint_every, ge=1)
    freeze_doc_tower: bool = _DEFAULTS.freeze_doc_tower
    scale: float = Field(default=_DEFAULTS.scale, gt=0.0, le=1000.0)
    held_out_fraction: float = Field(default=_DEFAULTS.held_out_fraction, gt=0.0, lt=1.0)
    max_held_out: int = Field(default=_DEFAULTS.max_held_out, ge=1, le=100_000)
    max_sentences: int | None = Field(default=None, ge=1)
    base_weight: float = Field(default=_DEFAULTS.base_weight, ge=0.0, le=1.0)
    max_query_tokens: int = Field(default=_DEFAULTS.max_query_tokens, ge=8, le=512)
    max_passage_tokens: int = Field(default=_DEFAULTS.max_passage_tokens, ge=16, le=512)
    seed: int = Field(default=_DEFAULTS.seed, ge=0, le=2**31 - 1)

    def to_config(self) -> RealmConfig:
        return RealmConfig(**self.model_dump()).validated()


class RealmJobIn(ApiRequest):
    config: RealmConfigIn = Field(default_factory=RealmConfigIn)
    model_name: str | None = Field(default=None, min_length=1, max_length=128, description="The new model version.")
    task: str | None = Field(default=None, min_length=1, max_length=128, description="Judge on this task's evidence.")
    resume_from: int | None = Field(default=None, ge=1, le=2**63 - 1, description="A killed REALM job to resume.")


class RealmJobOut(BaseModel):
    """A REALM job with what ``ferret realm status`` shows: progress, the RU curve, staleness, the guard."""

    id: int
    corpus_id: int | None
    state: JobState
    progress: float
    activity: str
    model: str | None
    step: int | None
    staleness: int | None
    best_utility: float | None
    best_step: int | None
    utility: list[dict[str, Any]]
    staleness_mean: float | None
    refreshes: int | None
    failed_refreshes: int | None
    guard: dict[str, Any] | None
    error: str | None
    created_at: Timestamp
    finished_at: Timestamp | None


class RealmJobList(BaseModel):
    jobs: list[RealmJobOut]


def realm_job_out(job: Job) -> RealmJobOut:
    result = job.result or {}
    counts = job.counts or {}
    return RealmJobOut(
        id=job.id,
        corpus_id=job.corpus_id,
        state=job.state,
        progress=job.progress,
        activity=str(counts.get("activity") or job.stage or ""),
        model=job.params.get("model_name"),
        step=counts.get("step"),
        staleness=counts.get("staleness"),
        best_utility=result.get("best_utility"),
        best_step=result.get("best_step"),
        utility=list(result.get("utility", [])),
        staleness_mean=result.get("staleness_mean"),
        refreshes=result.get("refreshes"),
        failed_refreshes=result.get("failed_refreshes"),
        guard=result.get("guard"),
        error=job.error,
        created_at=job.created_at,
        finished_at=job.finished_at,
    )


@router.post(
    "/v1/corpora/{corpus}/realm",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404, 409, 413, 422),
    summary="Start REALM pre-training of a corpus's retriever",
)
def start(
    body: RealmJobIn, _caller: AdminCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> JobOut:
    """Masks the corpus, pre-trains with the asynchronous index refresh, registers the WiSE-FT'd retriever as a
    model version and runs the guard; nothing is promoted. Poll ``/v1/realm/jobs/{id}``."""
    corpus_row = get_corpus(session, corpus)
    job = state.jobs.start_job(
        JOB_REALM,
        session,
        corpus=corpus_row,
        config=body.config.to_config(),
        model_name=body.model_name,
        task=body.task,
        resume_from=body.resume_from,
    )
    return job_out(job)


@router.get(
    "/v1/realm/jobs",
    response_model=RealmJobList,
    responses=error_responses(401, 403, 404, 422),
    summary="List REALM pre-training jobs",
)
def list_all(
    _caller: AdminCaller,
    session: SessionDep,
    corpus: str | None = Query(default=None, max_length=128),
    limit: int = Query(default=20, ge=1, le=500),
) -> RealmJobList:
    corpus_row = get_corpus(session, corpus) if corpus is not None else None
    jobs = list_jobs(session, corpus=corpus_row, kind=JOB_REALM, limit=limit)
    return RealmJobList(jobs=[realm_job_out(job) for job in jobs])


@router.get(
    "/v1/realm/jobs/{job_id}",
    response_model=RealmJobOut,
    responses=error_responses(401, 403, 404),
    summary="One REALM job with its retrieval-utility curve",
)
def get_one(_caller: AdminCaller, session: SessionDep, job_id: int = Path(ge=1, le=2**63 - 1)) -> RealmJobOut:
    job = get_job(session, job_id)
    if job.kind != JOB_REALM:
        raise NotFoundError(f"Job {job_id} is not a REALM pre-training job; see it at /v1/jobs/{job_id}.")
    return realm_job_out(job)


REALM_CONFIG_FIELDS = frozenset(f.name for f in fields(RealmConfig)) - {"device"}
"""The settings a request may carry (``tests/api/test_realm_routes.py`` keeps ``RealmConfigIn`` in step)."""
