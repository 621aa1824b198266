"""``ferret jobs list|show|cancel`` and ``ferret worker`` from the command line, on a fresh FERRET_HOME."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.job import create_job, get_job, set_celery_id, start_attempt
from ferret.core.db.models import JobState
from ferret.core.pipeline.promptagator.declaration import PROMPTAGATOR
from ferret.workers.apps.base import celery_config
from ferret.workers.names import QUEUE_OF_TASK, Queue, WorkerKind

runner = CliRunner()


def test_jobs_list_show_and_cancel(ferret_home: Path, session: Session) -> None:
    queued = create_job(session, "pipeline", params={"task": "faq"}).id
    running = create_job(session, "ingest").id
    session.commit()
    start_attempt(session, running, "ingest")
    session.commit()

    listed = runner.invoke(app, ["jobs", "list"])
    assert listed.exit_code == 0, listed.output
    assert "pipeline" in listed.output and "ingest" in listed.output and "running" in listed.output

    shown = runner.invoke(app, ["jobs", "show", str(queued)])
    assert shown.exit_code == 0 and f"job {queued} (pipeline): queued" in shown.output and '"faq"' in shown.output

    assert "cancelled" in runner.invoke(app, ["jobs", "cancel", str(queued)]).output
    assert "cancel requested" in runner.invoke(app, ["jobs", "cancel", str(running)]).output
    session.expire_all()
    assert get_job(session, queued).state == JobState.CANCELLED
    assert get_job(session, running).cancel_requested

    missing = runner.invoke(app, ["jobs", "show", "999"])
    assert missing.exit_code == 1 and "Job 999 does not exist" in missing.output


def test_a_command_marks_failed_the_embedded_job_of_an_exited_process(ferret_home: Path, session: Session) -> None:
    """A `ferret` process that ran a job in a thread was killed: the next command shows the job failed."""
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    job_id = create_job(session, "pipeline").id
    set_celery_id(session, job_id, f"embedded:{socket.gethostname()}:{exited.stdout.strip()}")
    start_attempt(session, job_id, "train")
    session.commit()

    shown = runner.invoke(app, ["jobs", "show", str(job_id)])
    assert shown.exit_code == 0 and f"job {job_id} (pipeline): failed" in shown.output
    assert "exited before it finished" in shown.output


def test_worker_refuses_an_unknown_kind_and_a_missing_broker(
    ferret_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = runner.invoke(app, ["worker", "--kind", "tpu"])
    assert unknown.exit_code == 1 and "--kind must be one of gpu, llm, cpu" in unknown.output
    monkeypatch.delenv("FERRET_BROKER_URL", raising=False)
    no_broker = runner.invoke(app, ["worker", "--kind", "cpu"])
    assert no_broker.exit_code == 1 and "FERRET_BROKER_URL is not set" in no_broker.output


def test_gpu_workers_take_one_task_at_a_time_and_never_lose_one() -> None:
    from ferret.core.settings import FerretSettings

    settings = FerretSettings(broker_url="redis://127.0.0.1:6379/0", task_time_limit_s=3600)
    gpu = celery_config(settings, WorkerKind.GPU)
    assert gpu["worker_concurrency"] == 1 and gpu["worker_prefetch_multiplier"] == 1
    assert gpu["task_acks_late"] and gpu["task_reject_on_worker_lost"]
    assert gpu["task_time_limit"] == 3600 and gpu["task_soft_time_limit"] == 3540
    # A running task is never handed to a second worker: the visibility timeout outlives the time limit.
    assert gpu["broker_transport_options"]["visibility_timeout"] > 3600
    assert gpu["task_default_queue"] == Queue.GPU
    task = {stage: PROMPTAGATOR.stage(stage).task for stage in PROMPTAGATOR.stage_names}
    assert task == {
        stage: f"ferret.pipeline.{stage}" for stage in ("generate", "filter", "train", "guard", "index", "configure")
    }
    assert {QUEUE_OF_TASK[task[stage]] for stage in ("train", "guard", "index", "configure")} == {Queue.GPU}
    assert QUEUE_OF_TASK[task["generate"]] == Queue.LLM and QUEUE_OF_TASK[task["filter"]] == Queue.CPU
    assert QUEUE_OF_TASK["ferret.corpus.ingest_source"] == Queue.CPU
    assert QUEUE_OF_TASK["ferret.corpus.build_index"] == Queue.GPU
