"""Progress when output is no terminal (issue 11, item 8): plain lines at a steady interval, not 7 silent minutes."""

from __future__ import annotations

import time

import pytest

from ferret.cli.render import PROGRESS_INTERVAL_ENV, PlainLineProgress, progress_bar


def test_without_a_terminal_progress_is_plain_lines_at_a_steady_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "0.05")
    bar = progress_bar()
    assert isinstance(bar, PlainLineProgress)  # pytest captures stderr: no terminal
    with bar:
        task = bar.add_task("embedding docs", total=10)
        bar.update(task, completed=4)
        time.sleep(0.5)  # nothing moves, the lines keep coming
        bar.update(task, completed=10)
        job = bar.add_task("job 3 pipeline: generate (stage 1 of 6, 92%), generating queries", total=1.0, of="job")
        bar.update(job, completed=0.15)
        fraction = bar.add_task("training", total=1.0)
        bar.update(fraction, completed=0.25)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("] embedding docs: started") and lines[0].startswith("[")
    assert sum(line.endswith("embedding docs: 4/10 (40%)") for line in lines) >= 3
    assert sum(line.endswith("embedding docs: 10/10 (100%)") for line in lines) == 1  # a finished task: once
    assert lines[-1].endswith("training: 25%")
    # a job's bar is the whole job's, and the line says so beside the stage's own share
    assert lines[-2].endswith("generate (stage 1 of 6, 92%), generating queries: 15% of the job")
    assert all("\x1b[" not in line for line in lines)  # no terminal control codes in a log


def test_a_job_of_several_stages_says_how_far_into_its_stage_it_is() -> None:
    """The bar is the whole job's: 60% of the pipeline's first stage read as 'generating queries: 9%' in the
    quickstart's log."""
    from ferret.cli.job_runs import _label
    from ferret.core.db.models import Job, JobState

    counts = {"activity": "generating queries", "stage_progress": 0.6, "stage_number": 1, "stages": 7, "documents": 120}
    pipeline = Job(id=3, kind="pipeline", stage="generate", state=JobState.RUNNING, counts=counts)
    ingest = Job(
        id=1, kind="ingest", stage="ingest", state=JobState.RUNNING, counts={"activity": "ingest", "stages": 1}
    )

    assert _label(pipeline) == "job 3 pipeline: generate (stage 1 of 7, 60%), generating queries, documents 120"
    assert _label(ingest) == "job 1 ingest: ingest, ingest"
