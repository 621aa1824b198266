"""The one generic way to start a job (``start_job``), derived from the declarations of ``JOB_KINDS``."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.job import active_jobs, create_job, mark_cancelled
from ferret.core.db.model_version import create_model_version
from ferret.core.db.models import Job, JobState
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from ferret.core.jobs.catalog import JOB_KINDS
from ferret.core.jobs.queue import JobQueue
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.settings import FerretSettings
from ferret.workers.dispatch import Dispatcher, start_job
from ferret_testing import free_port


def _jobs(session: Session) -> int:
    return int(session.scalar(select(func.count(Job.id))) or 0)


def test_every_job_kind_is_started_through_its_declaration_with_no_method_of_its_own() -> None:
    assert all(pipeline.prepare is not None for pipeline in JOB_KINDS.values())
    assert JOB_KINDS["ingest"].inputs == ("corpus", "source_kind", "config", "incremental", "created_corpus")
    assert JOB_KINDS["eval"].inputs == ("dataset", "split", "models", "corpus")
    assert JOB_KINDS["index_repair"].inputs == ("corpus", "actor")
    assert JOB_KINDS["index_build"].inputs == ("corpus", "model", "promote", "actor")
    starters = {name for name in vars(JobQueue) if name.startswith("start")}
    assert starters == {"start_job"}  # a new pipeline adds no method to the port (nor to its adapter)
    assert {name for name in vars(Dispatcher) if name.startswith("start")} == {"start_job"}


@pytest.mark.parametrize(
    ("kind", "inputs", "message"),
    [
        ("reindex", {"corpus": "docs"}, "Unknown job kind 'reindex'; the kinds are"),
        ("index_build", {"corpus": "docs", "modle": "base"}, "kind 'index_build' takes the inputs corpus, model"),
        ("ingest", {"corpus": "docs"}, "missing a required argument: 'source_kind'"),
        ("ingest", {"corpus": "docs", "source_kind": "ftp", "config": {}}, "Unknown source kind 'ftp'"),
        ("pipeline", {"task": "nope"}, "Task 'nope' does not exist"),
    ],
)
def test_bad_inputs_are_one_sentence_and_write_no_job(
    settings: FerretSettings, session: Session, kind: str, inputs: dict[str, Any], message: str
) -> None:
    create_corpus(session, "docs")
    session.commit()

    with pytest.raises((InvalidInputError, NotFoundError), match=message.replace("(", r"\(").replace(")", r"\)")):
        start_job(session, settings, kind, **inputs)

    session.rollback()
    assert _jobs(session) == 0


def test_a_broker_that_is_down_is_a_503_sentence_without_its_password(
    settings: FerretSettings, session: Session, tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("Badges are replaced at the front desk.", encoding="utf-8")
    create_corpus(session, "docs")
    session.commit()
    down = settings.model_copy(update={"broker_url": f"redis://:S3cretRedisPass@127.0.0.1:{free_port()}/0"})

    with pytest.raises(UnavailableError) as raised:
        start_job(session, down, "ingest", corpus="docs", source_kind="filesystem", config={"root": str(tmp_path)})

    message = str(raised.value)
    assert message.startswith("Could not reach the Celery broker at redis://:***@127.0.0.1:")
    assert "S3cretRedisPass" not in message and ". " not in message  # one sentence
    job = session.scalars(select(Job)).one()  # the row the retry reruns, named in the sentence
    assert f"job {job.id} is recorded as failed and can be retried" in message
    assert job.state == JobState.FAILED and "S3cretRedisPass" not in (job.error or "")


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (PipelineConfig(round_trip="nomodel"), NotFoundError, "Model version 'nomodel' does not exist"),
        (PipelineConfig(init="realm:nomodel"), NotFoundError, "Model version 'nomodel' does not exist"),
        (PipelineConfig(round_trip="hybrid"), InvalidInputError, "corpus 'facts' has none; index it first"),
    ],
)
def test_a_pipeline_naming_what_its_later_stages_lack_is_refused_at_once(
    settings: FerretSettings,
    session: Session,
    facts: Callable[..., int],
    config: PipelineConfig,
    error: type[Exception],
    message: str,
) -> None:
    """Checked before the job is written, not after hours of generation (the filter and train stages read them)."""
    facts(session, "facts", "facts-task")

    with pytest.raises(error, match=re.escape(message)):
        start_job(session, settings, "pipeline", task="facts-task", config=config)

    session.rollback()
    assert _jobs(session) == 0


def test_a_pipeline_starting_from_a_model_realm_did_not_make_is_refused_at_once(
    settings: FerretSettings, session: Session, facts: Callable[..., int]
) -> None:
    """It failed in the train stage, after the generation (hours on a CPU)."""
    facts(session, "facts", "facts-task")
    create_model_version(session, "tuned", "/models/tuned", 384)
    session.commit()

    with pytest.raises(InvalidInputError) as raised:
        start_job(session, settings, "pipeline", task="facts-task", config=PipelineConfig(init="realm:tuned"))

    assert str(raised.value).startswith("Model version 'tuned' was not pre-trained with `ferret realm pretrain`;")
    assert raised.value.for_http.startswith(
        "Model version 'tuned' was not pre-trained with REALM (POST /v1/corpora/facts/realm)"
    )
    session.rollback()
    assert _jobs(session) == 0


def test_a_second_pipeline_of_a_task_waits_for_the_first(
    settings: FerretSettings, session: Session, facts: Callable[..., int]
) -> None:
    """Two runs of one task at once wrote the same generation run's queries: one failed on a unique constraint."""
    facts(session, "facts", "facts-task")
    running = create_job(session, "pipeline")
    running.state, running.params = JobState.RUNNING, {"task": "facts-task"}
    session.commit()

    with pytest.raises(ConflictError, match=f"Task 'facts-task' already has pipeline job {running.id}; wait for it"):
        start_job(session, settings, "pipeline", task="facts-task", config=PipelineConfig())

    session.rollback()
    assert _jobs(session) == 1
    mark_cancelled(session, running.id)
    session.commit()
    assert active_jobs(session, "pipeline", task="facts-task") == []  # a finished one does not count
