"""Long CLI work as job rows (issue 11, item 10), with real processes: the command line as a subprocess that exits,
a detached runner that outlives it, SIGKILL of that runner, ``ferret jobs follow`` and ``ferret jobs retry``.

No broker anywhere: this is the embedded mode, where ``--async`` used to fail.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.engine import session_scope
from ferret.core.db.job import ORPHANED_ERROR, get_job, process_alive
from ferret.core.db.models import Document, IndexState, IndexVersion, Job, JobState, Passage
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import FerretSettings

pytestmark = pytest.mark.slow

runner = CliRunner()
STARTED = re.compile(r"job (\d+) \((\w+)\) started in a detached local runner")


def ferret(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """The console script in a process of its own, which exits before the test goes on."""
    command = [sys.executable, "-c", "from ferret.cli.main import main; main()", *args]
    environment = {**os.environ, "FERRET_PROGRESS_INTERVAL_S": "0.2"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=environment)


def runner_pid(settings: FerretSettings, job_id: int) -> int:
    with session_scope(settings.database_url) as session:
        owner = get_job(session, job_id).celery_id or ""
    prefix = f"embedded:{socket.gethostname()}:"
    assert owner.startswith(prefix), owner
    return int(owner.removeprefix(prefix).split(":")[0])  # <pid>:<start>


def wait_until_gone(pid: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while process_alive(str(pid)):
        assert time.monotonic() < deadline, f"runner {pid} still runs"
        time.sleep(0.1)


@pytest.fixture
def runners(settings: FerretSettings) -> Iterator[list[int]]:
    """Runner pids a test started; any still alive at the end is killed (a failing test leaves none behind)."""
    started: list[int] = []
    yield started
    for pid in started:
        if process_alive(str(pid)):
            os.kill(pid, signal.SIGKILL)


def start_detached(settings: FerretSettings, runners: list[int], *args: str) -> tuple[int, int]:
    """Run ``ferret <args> --async``; returns the job id and its runner's pid, checked alive after the CLI exited."""
    started = ferret(*args, "--async")
    assert started.returncode == 0, started.stderr + started.stdout
    found = STARTED.search(" ".join(started.stdout.split()))
    assert found is not None, started.stdout
    job_id = int(found.group(1))
    pid = runner_pid(settings, job_id)
    runners.append(pid)
    return job_id, pid


def test_ingest_async_runs_in_a_detached_runner_and_follow_streams_it_to_the_end(
    settings: FerretSettings,
    encoder: DualEncoder,
    tmp_path: Path,
    make_files: Callable[[Path, dict[str, str | bytes]], Path],
    runners: list[int],
) -> None:
    folder = make_files(tmp_path / "docs", {f"note{i}.txt": f"Note {i} is about topic number {i}." for i in range(5)})

    job_id, pid = start_detached(settings, runners, "ingest", "--corpus", "docs", "--path", str(folder))

    # The command has exited; its runner is another process, alive, in a session of its own (setsid), so neither
    # the command's end nor a closed terminal stops it.
    assert pid != os.getpid() and os.getsid(pid) == pid != os.getsid(0)
    listed = runner.invoke(app, ["jobs", "list"])
    assert listed.exit_code == 0 and re.search(rf"\b{job_id}\b.*ingest", " ".join(listed.output.split()))

    followed = ferret("jobs", "follow", str(job_id))

    assert followed.returncode == 0, followed.stderr + followed.stdout
    assert f"job {job_id} (ingest): succeeded" in followed.stdout
    assert f"job {job_id} ingest" in followed.stderr  # progress lines (no terminal: plain lines)
    wait_until_gone(pid)
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        assert job.state == JobState.SUCCEEDED and job.result is not None and job.result["added"] == 5
        assert session.scalar(select(func.count(Document.id))) == 5
    log = settings.home / "logs" / f"job-{job_id}.log"
    assert "ended succeeded" in log.read_text()

    again = ferret("jobs", "retry", str(job_id))  # a succeeded job has nothing to retry: one sentence, exit 1
    assert again.returncode == 1 and f"Job {job_id} is succeeded; only a failed or cancelled job" in again.stderr
    unknown = ferret("jobs", "follow", "999")
    assert unknown.returncode == 1 and "Job 999 does not exist" in unknown.stderr


def test_a_killed_runner_fails_its_job_and_a_retry_finishes_it_without_duplicates(
    settings: FerretSettings,
    encoder: DualEncoder,
    tmp_path: Path,
    make_files: Callable[[Path, dict[str, str | bytes]], Path],
    runners: list[int],
) -> None:
    words = ["river", "mountain", "harbour", "forest", "desert", "glacier", "valley", "island"]
    files: dict[str, str | bytes] = {
        f"place{i}.txt": f"Place {i} lies by the {words[i % 8]} and the {words[(i * 3) % 8]}; its code is {i * 7}."
        for i in range(600)
    }
    folder = make_files(tmp_path / "places", files)
    ingested = runner.invoke(app, ["ingest", "--corpus", "places", "--path", str(folder)])  # in the foreground
    assert ingested.exit_code == 0, ingested.output
    assert "added 600" in ingested.output

    job_id, pid = start_detached(settings, runners, "index", "build", "--corpus", "places")
    deadline = time.monotonic() + 180
    while True:  # kill it in the middle of embedding
        with session_scope(settings.database_url) as session:
            job = get_job(session, job_id)
        assert job.state in (JobState.QUEUED, JobState.RUNNING), (job.state, job.error)
        if job.state == JobState.RUNNING and 0.0 < job.progress < 0.9:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    wait_until_gone(pid)

    followed = ferret("jobs", "follow", str(job_id))

    assert followed.returncode == 1
    assert "exited before it finished" in " ".join(followed.stderr.split())
    with session_scope(settings.database_url) as session:
        assert get_job(session, job_id).error == ORPHANED_ERROR

    retried = runner.invoke(app, ["jobs", "retry", str(job_id)])

    assert retried.exit_code == 0, retried.output
    assert f"job {job_id} (index_build): succeeded" in retried.output
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        assert job.state == JobState.SUCCEEDED and job.error is None
        assert session.scalar(select(func.count(Job.id)).where(Job.kind == "index_build")) == 1  # the same job
        live = list(
            session.scalars(select(IndexVersion).where(IndexVersion.state.in_([IndexState.READY, IndexState.ACTIVE])))
        )
        assert [version.id for version in live] == [(job.result or {})["index_version_id"]]  # one live version, no twin
        passages = session.scalar(select(func.count(Passage.id)))
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        assert backend.count(live[0].collection) == passages  # every passage once: the killed build left nothing
        assert backend.list_collections() == [live[0].collection]  # the killed build's collection was dropped
    finally:
        backend.close()


def test_pipeline_run_async_works_without_a_broker_and_can_be_cancelled(
    settings: FerretSettings, database_url: str, runners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferret.core.db.corpus import create_corpus
    from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task

    with session_scope(settings.database_url) as session:
        create_corpus(session, "docs")
        examples = [ExampleSpec(query="a", document_text="one"), ExampleSpec(query="b", document_text="two")]
        create_task(session, TaskSpec(name="faq", corpus="docs", examples=examples))
    monkeypatch.delenv("FERRET_BROKER_URL", raising=False)

    job_id, pid = start_detached(settings, runners, "pipeline", "run", "--task", "faq")
    cancelled = runner.invoke(app, ["jobs", "cancel", str(job_id)])
    assert cancelled.exit_code == 0, cancelled.output

    followed = ferret("jobs", "follow", str(job_id))

    assert followed.returncode == 1 and f"job {job_id} (pipeline): cancelled" in followed.stdout
    wait_until_gone(pid)
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        assert job.state == JobState.CANCELLED and job.params["task"] == "faq" and job.payload is not None


def test_a_failed_first_ingest_in_a_detached_runner_leaves_no_corpus_and_its_retry_makes_it(
    settings: FerretSettings, tmp_path: Path, runners: list[int]
) -> None:
    """Issue 11, item 10: the foreground ingest removed the corpus its failed first ingest created; the detached
    runner left it empty. The corpus.jsonl's first line is fine (the command's emptiness check reads only that one),
    its second is not, so the runner's ingest fails."""
    dataset = tmp_path / "beir"
    dataset.mkdir()
    good = '{"_id": "d1", "title": "Fjords", "text": "Glaciers carve fjords over millennia."}\n'
    (dataset / "corpus.jsonl").write_text(good + "{not json\n")

    job_id, pid = start_detached(settings, runners, "ingest", "--corpus", "fresh", "--beir", str(dataset))
    followed = ferret("jobs", "follow", str(job_id))

    assert followed.returncode == 1 and f"job {job_id} (ingest): failed" in followed.stdout
    wait_until_gone(pid)
    corpora = ferret("corpora")
    assert "fresh" not in corpora.stdout, corpora.stdout
    with session_scope(settings.database_url) as session:
        assert get_job(session, job_id).state == JobState.FAILED

    (dataset / "corpus.jsonl").write_text(good)  # fixed: the same job, retried, creates the corpus and fills it
    retried = runner.invoke(app, ["jobs", "retry", str(job_id)])

    assert retried.exit_code == 0, retried.output
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        assert job.state == JobState.SUCCEEDED and job.corpus_id is not None
        assert session.scalar(select(func.count(Document.id)).where(Document.corpus_id == job.corpus_id)) == 1


def test_ctrl_c_stops_a_first_ingest_at_once_and_leaves_no_corpus(settings: FerretSettings, tmp_path: Path) -> None:
    """Ctrl-C marked the job from the command while the ingest's thread held SQLite's write lock (an ingest writes
    its documents in one transaction): the command waited out the 30 s busy timeout, then blamed "another Ferret
    process", and the empty corpus stayed. Now the thread stops at its next report and undoes its stage first."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(4_000):  # enough that the ingest still runs when the signal comes
        (folder / f"note-{i:04d}.txt").write_text(f"Note {i}: the quarterly report of team {i % 17} is due.")
    command = [sys.executable, "-c", "from ferret.cli.main import main; main()", "ingest", "-c", "many", "--path"]
    environment = {**os.environ, "FERRET_PROGRESS_INTERVAL_S": "0.2"}
    process = subprocess.Popen(
        [*command, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        preexec_fn=_as_from_a_shell,
    )
    try:
        deadline = time.monotonic() + 120
        while not _job_running(settings):  # the job's row says it runs: its thread is reading the folder
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        time.sleep(1.0)
        signalled = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 130, out + err
    assert "job 1 interrupted; `ferret jobs retry 1` runs it again" in " ".join(out.split())
    assert "locked" not in out + err and took < 25, (took, err[-500:])  # the lock's 30 s wait is not in it
    assert "many" not in ferret("corpora").stdout
    with session_scope(settings.database_url) as session:
        job = get_job(session, 1)
        assert (job.state, job.error) == (
            JobState.FAILED,
            "Interrupted (Ctrl-C); `ferret jobs retry 1` runs it again.",
        )


def _as_from_a_shell() -> None:
    """Ctrl-C reaches the command as it does from a terminal. A child inherits its parent's ignored signals and its
    blocked-signal mask, and this test process may hold either from an earlier test in the same pytest-xdist worker
    (libraries block SIGINT around the helper processes they start): once, under `make test`, the SIGINT was never
    delivered, and the ingest ran to its end with exit status 0."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _job_running(settings: FerretSettings) -> bool:
    try:
        with session_scope(settings.database_url) as session:
            job = session.get(Job, 1)
            return job is not None and job.state == JobState.RUNNING
    except Exception:  # the database is not made yet
        return False
