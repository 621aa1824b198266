"""Pipeline jobs through real Celery workers on a real redis-server, and in-process in embedded mode.

Each worker test starts the three worker kinds (``ferret worker --kind llm|cpu|gpu``) as processes on its own
Redis database and FERRET_HOME; the pipeline trains for a few steps on a twenty-document corpus.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.engine import session_scope
from ferret.core.db.models import (
    GenerationRun,
    IndexState,
    IndexVersion,
    JobState,
    ModelVersion,
    Passage,
    RetrievalTask,
    SyntheticQuery,
)
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.jobs.queue import Placement
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.settings import FerretSettings
from ferret.workers.dispatch import cancel_job, retry_job, start_job, wait_for_embedded_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
QUICK = PipelineConfig(
    queries_per_doc=2, round_trip="bm25", round_trip_k=3, held_out_fraction=0.2, max_steps=4, batch_size=8
)


def _start(session: Session, settings: FerretSettings, task_id: int, config: PipelineConfig) -> int:
    task = session.get(RetrievalTask, task_id)
    assert task is not None
    return start_job(session, settings, "pipeline", task=task, config=config).id


def _count(session: Session, statement: object) -> int:
    return int(session.scalar(statement) or 0)  # type: ignore[call-overload]


def _assert_one_of_each(session: Session, settings: FerretSettings, corpus_id: int, model_name: str) -> IndexVersion:
    """One generation run with one row per sample, one model version, one live index version with one point per
    passage: whatever was delivered twice left no duplicate behind."""
    runs = list(session.scalars(select(GenerationRun)))
    assert len(runs) == 1
    assert _count(session, select(func.count(SyntheticQuery.id)).where(SyntheticQuery.run_id == runs[0].id)) == 20 * 2
    assert [m.name for m in session.scalars(select(ModelVersion).order_by(ModelVersion.id))] == ["base", model_name]
    versions = list(session.scalars(select(IndexVersion).where(IndexVersion.corpus_id == corpus_id)))
    assert [(v.state, v.model_version.name) for v in versions] == [(IndexState.ACTIVE, model_name)]
    passages = _count(session, select(func.count(Passage.id)).where(Passage.corpus_id == corpus_id))
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        assert backend.resolve_alias("facts") == versions[0].collection
        assert backend.count(versions[0].collection) == passages == 20
    finally:
        backend.close()
    return versions[0]


def test_pipeline_runs_through_the_queues(session: Session, workers: Any, facts: Callable[..., int]) -> None:
    from ferret.core.db.task import get_task

    task_id = facts(session, "facts", "facts-task")
    llm, cpu, gpu = workers.start_all()

    job_id = _start(session, workers.settings, task_id, PipelineConfig(**{**QUICK.to_json(), "promote": "force"}))
    job = workers.wait_for(job_id, lambda j: j.state in FINISHED)

    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempts == 6 and job.progress == 1.0 and job.stage == "configure"
    assert job.celery_id == f"ferret-job-{job_id}-generate"
    assert job.result is not None and job.result["promoted"] and job.result["model_name"] == f"facts-task-job{job_id}"
    assert job.result["stages_done"] == ["generate", "filter", "train", "guard", "index", "configure"]
    # Each stage ran on the worker of its queue.
    assert "ferret.pipeline.generate" in llm.tail(400) and "ferret.pipeline.train" not in llm.tail(400)
    assert "ferret.pipeline.filter" in cpu.tail(400)
    assert all(f"ferret.pipeline.{stage}" in gpu.tail(400) for stage in ("train", "guard", "index", "configure"))
    session.expire_all()
    assert get_task(session, "facts-task").id == task_id
    _assert_one_of_each(session, workers.settings, job.corpus_id or 0, f"facts-task-job{job_id}")


def test_killed_gpu_worker_task_is_redelivered_without_duplicates(
    session: Session, workers: Any, facts: Callable[..., int]
) -> None:

    task_id = facts(session, "facts", "facts-task")
    # An unacknowledged task goes back to the queue 20 s after its delivery (production: the time limit + 10 min).
    *_, gpu = workers.start_all(FERRET_BROKER_VISIBILITY_TIMEOUT_S="20")
    config = PipelineConfig(**{**QUICK.to_json(), "promote": "force", "max_steps": 8})

    job_id = _start(session, workers.settings, task_id, config)
    workers.wait_for(job_id, lambda j: j.stage == "train" or j.state in FINISHED, every_s=0.05)
    gpu.kill()  # SIGKILL to the worker and its pool process, in the middle of the train task
    with session_scope(workers.settings.database_url) as check:
        assert _count(check, select(func.count(ModelVersion.id)).where(ModelVersion.name != "base")) == 0
    replacement = workers.start("gpu", FERRET_BROKER_VISIBILITY_TIMEOUT_S="20")

    job = workers.wait_for(job_id, lambda j: j.state in FINISHED, timeout_s=420)

    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempts >= 6  # five stages and at least the redelivered train
    assert "ferret.pipeline.train" in replacement.tail(400)
    session.expire_all()
    _assert_one_of_each(session, workers.settings, job.corpus_id or 0, f"facts-task-job{job_id}")


def test_cancel_stops_a_running_job(session: Session, workers: Any, facts: Callable[..., int]) -> None:

    task_id = facts(session, "facts", "facts-task")
    workers.start_all()
    long_training = PipelineConfig(**{**QUICK.to_json(), "promote": "force", "max_steps": 400})

    job_id = _start(session, workers.settings, task_id, long_training)
    workers.wait_for(job_id, lambda j: j.stage == "train" or j.state in FINISHED)
    requested_at = time.monotonic()
    job = cancel_job(session, workers.settings, job_id)
    assert job.cancel_requested and job.state == JobState.RUNNING

    job = workers.wait_for(job_id, lambda j: j.state in FINISHED, timeout_s=120)

    assert job.state == JobState.CANCELLED and job.stage == "train"
    assert time.monotonic() - requested_at < 120
    session.expire_all()
    assert _count(session, select(func.count(ModelVersion.id)).where(ModelVersion.name != "base")) == 0
    assert _count(session, select(func.count(IndexVersion.id))) == 0  # nothing built, nothing promoted


def test_a_cancel_between_stages_ends_the_job_and_a_retry_runs_it(
    session: Session, workers: Any, facts: Callable[..., int]
) -> None:
    """The filter is done and the train task waits in the gpu queue, whose worker is down: the cancel revokes it,
    and the gpu worker that starts later drops it. The job must end cancelled (it read "running" for good), and a
    retry must run."""
    task_id = facts(session, "facts", "facts-task")
    llm, cpu = workers.start("llm"), workers.start("cpu")
    workers.wait_ready(llm, cpu)
    # Each says at start what the embedded store cannot do beside a server (the API's search failed their jobs).
    assert "FERRET_QDRANT_URL is not set" in " ".join(llm.log.read_text(errors="replace").split())
    job_id = _start(session, workers.settings, task_id, PipelineConfig(**{**QUICK.to_json(), "promote": "force"}))
    workers.wait_for(job_id, lambda j: "filter" in (j.result or {}).get("stages_done", []) or j.state in FINISHED)

    job = cancel_job(session, workers.settings, job_id)
    assert job.cancel_requested and job.state == JobState.RUNNING
    gpu = workers.start("gpu")

    job = workers.wait_for(job_id, lambda j: j.state in FINISHED, timeout_s=180)

    assert job.state == JobState.CANCELLED and job.stage == "filter"
    assert f"ferret-job-{job_id}-train" in gpu.tail(200)  # dropped, not run
    session.expire_all()
    assert _count(session, select(func.count(ModelVersion.id)).where(ModelVersion.name != "base")) == 0
    retried = retry_job(session, workers.settings, job_id, placement=Placement.QUEUE)  # and it runs again
    # queued, or already running: the idle workers may take it before the row is read back
    assert retried.state in (JobState.QUEUED, JobState.RUNNING) and not retried.cancel_requested
    job = workers.wait_for(job_id, lambda j: j.state in FINISHED, timeout_s=240)
    # Under new task ids: the workers still hold the cancelled run's as revoked and dropped the retry's (it read
    # "queued" for good).
    assert job.state == JobState.SUCCEEDED, (job.state, job.error)
    assert job.celery_id == f"ferret-job-{job_id}-r1-generate"


def test_embedded_mode_runs_the_same_steps_in_process(
    session: Session, settings: FerretSettings, llm_endpoint: Any, facts: Callable[..., int]
) -> None:
    task_id = facts(session, "facts", "facts-task")
    embedded = FerretSettings(home=settings.home, llm_base_url=llm_endpoint.base_url)
    assert embedded.broker_url is None

    job_id = _start(session, embedded, task_id, PipelineConfig(**{**QUICK.to_json(), "promote": "never"}))
    assert wait_for_embedded_job(job_id, timeout_s=300)

    session.expire_all()
    from ferret.core.db.job import embedded_owner, get_job

    job = get_job(session, job_id)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.celery_id == embedded_owner() and job.attempts == 6
    assert job.result is not None and not job.result["promoted"]
    versions = list(session.scalars(select(IndexVersion)))
    assert [v.state for v in versions] == [IndexState.READY]  # built to compare, not promoted
