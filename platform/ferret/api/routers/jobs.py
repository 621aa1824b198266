"""Jobs: start the Promptagator pipeline for a task, watch its progress, cancel it, retry it.

Jobs go through the runtime's job queue (``ferret.core.jobs.queue.JobQueue``: Celery when a broker is configured, a
thread in this process in embedded mode).
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Path, Query, status
from fastapi.concurrency import run_in_threadpool

from ferret.api.auth import AdminCaller, Caller, IngestCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.schemas import JobIn, JobList, JobOut
from ferret.core.db.api_key import scopes_grant
from ferret.core.db.job import FINISHED_STATES, get_job, list_jobs
from ferret.core.db.models import ApiKeyScope, Job, JobState
from ferret.core.db.task import get_task
from ferret.core.errors import ForbiddenError
from ferret.core.jobs.push_jobs import JOB_PUSH_INDEX, shown_params
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.runtime.context import Runtime

router = APIRouter(tags=["jobs"])
JobId = Path(ge=1, le=2**63 - 1)
MAX_JOB_WAIT_S = 60.0
"""The longest ``GET /v1/jobs/{id}?wait=`` holds a request: below the usual proxy read timeouts (nginx: 60 s)."""
JOB_WAIT_CHECK_S = 0.25


def job_out(job: Job) -> JobOut:
    out = JobOut.model_validate(job)
    if job.kind == JOB_PUSH_INDEX:  # the pushed batch stays in the row; the API shows its size
        out.params = shown_params(dict(job.params or {}))
    return out


@router.get("/v1/jobs", response_model=JobList, responses=error_responses(401, 403, 422), summary="List jobs")
def list_all(
    _caller: AdminCaller,
    session: SessionDep,
    corpus: str | None = Query(default=None, max_length=128),
    state: JobState | None = None,
    limit: int = Query(default=50, ge=1, le=500),
) -> JobList:
    """The newest jobs first, optionally of one corpus and in one state."""
    return JobList(jobs=[job_out(job) for job in list_jobs(session, corpus=corpus, state=state, limit=limit)])


@router.post(
    "/v1/jobs",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404, 409, 413, 422),
    summary="Start the training pipeline of a task",
)
def start(body: JobIn, _caller: AdminCaller, session: SessionDep, state: StateDep) -> JobOut:
    """Queues generate → filter → train → guard → index → promote for the task; poll the job for progress."""
    task = get_task(session, body.task)
    job = state.jobs.start_job("pipeline", session, task=task, config=PipelineConfig(**body.config.model_dump()))
    return job_out(job)


@router.post(
    "/v1/jobs/{job_id}/retry",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404, 409, 422, 503),
    summary="Run a failed or cancelled job again",
)
def retry(_caller: AdminCaller, session: SessionDep, state: StateDep, job_id: int = JobId) -> JobOut:
    """The same job again, from the input stored in its row (``ferret jobs retry``): what it finished before is
    found again, not redone, so a retry makes no duplicates."""
    return job_out(state.jobs.retry_job(session, job_id))


@router.get(
    "/v1/jobs/{job_id}", response_model=JobOut, responses=error_responses(401, 403, 404, 422), summary="One job"
)
async def get_one(
    caller: IngestCaller,
    state: StateDep,
    job_id: int = JobId,
    wait: float = Query(
        default=0,
        ge=0,
        le=MAX_JOB_WAIT_S,
        description="Seconds to wait for the job to end (succeeded, failed or cancelled) before answering; "
        "0 answers at once.",
    ),
) -> JobOut:
    """Any job for an admin key; a push job (the ``job_url`` of a 202 push) for an ingest key, which can watch the
    pushes it may make but nothing else.

    With ``wait``, the answer comes when the job ends or the time is up, whichever is first: a connector waiting
    for its push to become searchable makes one request instead of polling. Polls are not free: each costs the
    server about 5 ms of CPU, and 20 a second took that from the embedding they waited for (benchmarks/RESULTS.md,
    issue 16). The job is read again every ``JOB_WAIT_CHECK_S`` seconds, off the event loop."""
    deadline = time.monotonic() + wait
    while True:
        job = await run_in_threadpool(_read_job, state, caller, job_id)
        left = deadline - time.monotonic()
        if job.state in FINISHED_STATES or left <= 0:
            return job
        await asyncio.sleep(min(JOB_WAIT_CHECK_S, left))


def _read_job(state: Runtime, caller: Caller, job_id: int) -> JobOut:
    with state.sessions() as session:
        job = get_job(session, job_id)
        if job.kind != JOB_PUSH_INDEX and not scopes_grant(caller.scopes, ApiKeyScope.ADMIN):
            raise ForbiddenError(
                f"The API key {caller.name!r} may read push jobs only; job {job_id} is a {job.kind} job."
            )
        return job_out(job)


@router.post(
    "/v1/jobs/{job_id}/cancel",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404, 409),
    summary="Cancel a job",
)
def cancel(
    _caller: AdminCaller,
    session: SessionDep,
    state: StateDep,
    job_id: int = JobId,
    force: bool = Query(
        default=False,
        description="Mark a running job cancelled now, for one whose worker died (its task would come back only "
        "after the broker's visibility timeout); a stage still running stops at its next check.",
    ),
) -> JobOut:
    """A queued job is cancelled at once; a running one stops at its next check between batches."""
    return job_out(state.jobs.cancel_job(session, job_id, force=force))
