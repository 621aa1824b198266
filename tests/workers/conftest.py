"""Fixtures of the worker tests: a real redis-server, real Celery worker processes, a stdlib LLM endpoint.

- ``redis_server``: ``redis-server`` from the Debian package on 127.0.0.1 and a free port, once per session, with
  no persistence. Each test gets its own Redis database number (``broker_url``), so queues never mix.
- ``workers``: starts ``ferret worker --kind <kind>`` processes, each in its own process group (the test can
  SIGKILL a worker with its pool processes, as a dying machine would), with a shared FERRET_HOME and SQLite file.
- ``llm_endpoint``: an OpenAI-compatible server from the standard library that answers every completion with a
  plausible query made from the prompt's last document.
- ``job_database_url``: a migrated database on SQLite, then on PostgreSQL (``start_postgres`` of tests/core/db).

Without redis-server (or PostgreSQL) the tests are skipped on a workstation and fail when ``CI`` is set.
Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.job import get_job
from ferret.core.db.models import Document, Job, Passage
from ferret.core.settings import FerretSettings
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task
from ferret_testing import free_port, skip_or_fail

TOPICS: list[tuple[str, str]] = [
    ("Paris", "Paris is the capital and largest city of France, on the river Seine."),
    ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    ("Jupiter", "Jupiter is the largest planet of the solar system, a gas giant with a great red spot."),
    ("Espresso", "Espresso is coffee brewed by forcing hot water through finely ground beans."),
    ("Volcano", "A volcano erupts when molten rock called magma reaches the surface of the earth."),
    ("Chess", "In chess the king is checkmated when it is attacked and cannot escape."),
    ("Penguins", "Penguins are flightless birds that swim in the cold seas of the southern hemisphere."),
    ("Tides", "Ocean tides rise and fall twice a day, pulled by the gravity of the moon."),
    ("Bread", "Bread dough rises because yeast ferments sugar and releases carbon dioxide gas."),
    ("Glaciers", "Glaciers are slow rivers of ice that carve valleys as they move down mountains."),
    ("Honeybees", "Honeybees dance to tell the hive where flowers with nectar can be found."),
    ("Lightning", "Lightning is a giant spark of static electricity between clouds and the ground."),
    ("Vaccines", "Vaccines train the immune system to recognise a virus before an infection."),
    ("Rainbows", "A rainbow appears when sunlight is refracted and reflected inside raindrops."),
    ("Sourdough", "Sourdough starter is a culture of wild yeast and lactic acid bacteria."),
    ("Saturn", "Saturn is famous for its bright rings made of ice and rock particles."),
    ("Olive oil", "Olive oil is pressed from olives and is central to Mediterranean cooking."),
    ("Earthquakes", "Earthquakes happen when tectonic plates slip suddenly along a fault line."),
    ("Octopus", "An octopus has three hearts, blue blood and can change the colour of its skin."),
    ("Compass", "A compass needle points north because it aligns with the magnetic field of the earth."),
]
"""Twenty one-line documents on distinct topics (external ids d1..d20)."""

QUESTIONS = ["what is {t}", "tell me about {t}", "{t} explained", "facts about {t}"]


# -- redis-server ------------------------------------------------------------------------------------------------


@dataclass
class RedisServer:
    host: str
    port: int
    databases = itertools.count(1)

    def url(self, database: int) -> str:
        return f"redis://{self.host}:{self.port}/{database}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if binary is None:
        skip_or_fail("redis-server is not installed (Debian package `redis-server`).", "`make system-deps` installs it")
        raise AssertionError("unreachable")
    folder = Path(tempfile.mkdtemp(prefix="ferret-redis-"))
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--dir", str(folder), "--databases", "64", "--protected-mode", "yes"]
    log = open(folder / "redis.log", "wb")  # noqa: SIM115 - closed at teardown
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start:\n{(folder / 'redis.log').read_text()}") from None
                time.sleep(0.1)
        client.close()
        yield RedisServer("127.0.0.1", port)
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    """A Redis database of its own for this test (numbers 1-63), emptied."""
    import redis

    database = next(redis_server.databases) % 63 + 1
    url = redis_server.url(database)
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


# -- the LLM endpoint --------------------------------------------------------------------------------------------


@dataclass
class QueryWriter:
    """An OpenAI-compatible endpoint whose completions are queries about the prompt's last document."""

    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests += 1
        if path.endswith("/models"):
            return {"object": "list", "data": [{"id": "query-writer", "object": "model", "owned_by": "tests"}]}
        prompt = str(body.get("prompt") or "")
        lines = prompt.splitlines()
        document = lines[-2].split(": ", 1)[-1] if len(lines) >= 2 else prompt
        topic = " ".join(document.split()[:3]).lower().strip(".,")
        choices = [
            {"index": i, "text": " " + QUESTIONS[i % len(QUESTIONS)].format(t=topic), "finish_reason": "stop"}
            for i in range(int(body.get("n") or 1))
        ]
        return {
            "id": "cmpl-tests",
            "object": "text_completion",
            "created": 0,
            "model": "query-writer",
            "choices": choices,
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
        }


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def _reply(self, body: dict[str, Any]) -> None:
        payload = json.dumps(self.server.writer.answer(self.path, body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._reply(json.loads(self.rfile.read(length) or b"{}"))

    def do_GET(self) -> None:
        self._reply({})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def llm_endpoint() -> Iterator[QueryWriter]:
    writer = QueryWriter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.writer = writer  # type: ignore[attr-defined]
    writer.server = server
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield writer
    server.shutdown()
    server.server_close()


# -- a corpus and a task -----------------------------------------------------------------------------------------


def add_facts(session: Session, corpus_name: str, task_name: str) -> int:
    """Corpus ``corpus_name`` with the twenty TOPICS (one passage each) and a two-example task; returns the task id."""
    corpus = create_corpus(session, corpus_name)
    for number, (title, body) in enumerate(TOPICS, 1):
        session.add(
            Document(
                corpus_id=corpus.id,
                source="tests",
                external_id=f"d{number}",
                title=title,
                body=body,
                content_hash=hashlib.sha256(body.encode()).hexdigest(),
                passages=[Passage(corpus_id=corpus.id, ordinal=0, text=f"{title}. {body}", token_count=20)],
            )
        )
    session.flush()
    spec = TaskSpec(
        name=task_name,
        corpus=corpus_name,
        examples=[
            ExampleSpec(query="capital of France", document="d1"),
            ExampleSpec(query="why bread rises", document="d9"),
        ],
    )
    task = create_task(session, spec)
    session.commit()
    return task.id


@pytest.fixture
def facts() -> Callable[[Session, str, str], int]:
    return add_facts


# -- worker processes --------------------------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    kind: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes at once: nothing gets to clean up or acknowledge."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):  # pool processes left behind by a killed parent
            os.killpg(self.process.pid, signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Workers:
    """Starts worker processes that share one environment; ``settings`` is how the test sees the same setup."""

    env: dict[str, str]
    settings: FerretSettings
    folder: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(self, kind: str, **env: str) -> WorkerProcess:
        ferret = Path(sys.executable).parent / "ferret"
        number = len(self.started)
        log = self.folder / f"worker-{kind}-{number}.log"
        command = [str(ferret), "worker", "--kind", kind, "--hostname", f"{kind}{number}-{os.getpid()}@%h"]
        command += ["--loglevel", "info"]
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                command,
                # its temporary files (billiard's pymp-* folders, left when a pool process exits at once) stay
                # in the test's folder rather than in /tmp
                env={**self.env, "TMPDIR": str(self.folder), **env},
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes the pool processes with it
            )
        worker = WorkerProcess(kind, process, log)
        self.started.append(worker)
        return worker

    def wait_ready(self, *workers: WorkerProcess, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        for worker in workers:
            while " ready." not in (worker.log.read_text(errors="replace") if worker.log.exists() else ""):
                if worker.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the {worker.kind} worker did not start:\n{worker.tail()}")
                time.sleep(0.2)

    def start_all(self, **env: str) -> list[WorkerProcess]:
        workers = [self.start(kind, **env) for kind in ("llm", "cpu", "gpu")]
        self.wait_ready(*workers)
        return workers

    def logs(self) -> str:
        return "\n\n".join(f"--- {w.kind} worker ({w.log.name}):\n{w.tail()}" for w in self.started)

    def wait_for(
        self, job_id: int, predicate: Callable[[Job], bool], *, timeout_s: float = 300.0, every_s: float = 0.2
    ) -> Job:
        """Poll the job row until ``predicate`` holds; fails with the workers' logs after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with session_scope(self.settings.database_url) as session:
                job = get_job(session, job_id)
                session.expunge(job)
            if predicate(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {job.state.value} at stage {job.stage!r} ({job.error}) after {timeout_s} s\n"
                    + self.logs()
                )
            time.sleep(every_s)


@pytest.fixture
def workers(
    settings: FerretSettings, database_url: str, broker_url: str, llm_endpoint: QueryWriter, tmp_path: Path
) -> Iterator[Workers]:
    """Worker processes on this test's FERRET_HOME, Redis database and LLM endpoint; stopped at the end."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("FERRET_") and key not in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")
    }
    env.update(
        FERRET_HOME=str(settings.home),
        FERRET_BROKER_URL=broker_url,
        FERRET_LLM_BASE_URL=llm_endpoint.base_url,
        FERRET_LLM_MAX_RETRIES="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    test_settings = FerretSettings(home=settings.home, broker_url=broker_url, llm_base_url=llm_endpoint.base_url)
    group = Workers(env, test_settings, tmp_path)
    try:
        yield group
    finally:
        for worker in group.started:
            worker.stop()


# -- the job table on SQLite and PostgreSQL ----------------------------------------------------------------------


def _db_conftest() -> Any:
    """tests/core/db/conftest.py as a module, for ``start_postgres`` (conftests cannot be imported by name)."""
    path = Path(__file__).resolve().parent.parent / "core" / "db" / "conftest.py"
    spec = importlib.util.spec_from_file_location("ferret_tests_db_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def jobs_postgres_url() -> Iterator[str]:
    """A PostgreSQL database migrated to the newest revision, for the whole session."""
    from ferret.core.db.migrate import upgrade

    db_conftest = _db_conftest()
    folder = Path(tempfile.mkdtemp(prefix="ferret-pg-jobs-"))
    try:
        try:
            url, stop = db_conftest.start_postgres(folder)
        except db_conftest.PostgresNotInstalled as error:
            skip_or_fail(str(error))
            raise
        try:
            upgrade(url)
            yield url
        finally:
            stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def job_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database with no jobs and no corpora: a fresh SQLite file, then the session's PostgreSQL."""
    from ferret.core.db.migrate import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        upgrade(url)
        return url
    url = str(request.getfixturevalue("jobs_postgres_url"))
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM jobs"))
        connection.execute(text("DELETE FROM corpora"))
    engine.dispose()
    return url
