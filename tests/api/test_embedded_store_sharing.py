"""The embedded store shared by the server and CLI commands (issue 11, items 6 and 7).

The model: SQLite is shared by every process (WAL journal, a writer waits up to the busy timeout); a Qdrant Edge
shard is open in one process at a time (its write-ahead log is locked). Each collision is one sentence saying what
to do, never a traceback. And ``ferret search`` applies the ACL like the API: ``public`` unless ``--group`` names
groups, or ``--all-groups`` asks for an administrator's view.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from ferret.api.app import create_app
from ferret.cli.main import app as cli_app
from ferret.core.settings import get_settings


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory, make_installation: Any) -> Any:
    """An installation of this module's own: the session's shared app holds the shards of the shared one."""
    return make_installation(tmp_path_factory.mktemp("sharing-home"))


@pytest.fixture
def cli(installation: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("FERRET_HOME", str(installation.settings.home))
    monkeypatch.setenv("COLUMNS", "250")
    get_settings.cache_clear()

    def invoke(*args: str) -> Result:
        get_settings.cache_clear()
        return CliRunner().invoke(cli_app, list(args))

    yield invoke
    get_settings.cache_clear()


def found(result: Result) -> set[str]:
    assert result.exit_code == 0, result.output
    names = ("pub-1", "pub-2", "a-1", "a-2", "b-1", "ab-1")
    return {name for name in names if re.search(rf"(?<![\w-]){name}(?![\w-])", result.stdout)}


def one_sentence(result: Result) -> str:
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert text.startswith("Error: ") and text.endswith(".")
    return text


def test_search_without_group_sees_public_documents_only(cli: Any, visible: dict[str, set[str]]) -> None:
    query = ("search", "volcano", "--corpus", "kb", "-k", "20", "--mode", "sparse")
    assert found(cli(*query)) == visible["public"]
    assert found(cli(*query, "--group", "a")) == visible["a"]
    assert found(cli(*query, "--all-groups")) == {"pub-1", "pub-2", "a-1", "a-2", "b-1", "ab-1"}
    assert "--all-groups already sees every group" in one_sentence(cli(*query, "--all-groups", "-g", "a"))


def test_a_shard_held_by_the_server_is_one_sentence(cli: Any, installation: Any) -> None:
    """The command line in a process of its own: inside the server's process the shards are shared, not locked."""
    with TestClient(create_app(installation.settings)) as client:
        response = client.post(
            "/v1/corpora/kb/search",
            json={"query": "volcano"},
            headers={"Authorization": f"Bearer {installation.keys['search-a']}"},
        )
        assert response.status_code == 200  # the server now holds the shard of kb
        command = [sys.executable, "-c", "from ferret.cli.main import main; main()"]
        done = subprocess.run(
            [*command, "search", "volcano", "--corpus", "kb", "--mode", "sparse"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "FERRET_HOME": str(installation.settings.home), "COLUMNS": "250"},
        )
        assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
        text = " ".join((done.stdout + done.stderr).split())
        deleted = subprocess.run(  # deleting its files under the server left it serving them from memory
            [*command, "corpus", "delete", "kb", "--yes"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "FERRET_HOME": str(installation.settings.home), "COLUMNS": "250"},
        )
        assert deleted.returncode == 1 and "open in another Ferret process" in deleted.stdout + deleted.stderr
        assert found(cli("search", "volcano", "--corpus", "kb", "--mode", "sparse"))  # the corpus is whole
        # the same command inside the server's process shares its shards and succeeds
        assert found(cli("search", "volcano", "--corpus", "kb", "--mode", "sparse"))
    assert text == (
        "Error: The embedded index 'kb__v1' is open in another Ferret process (`ferret serve`, a worker, `ferret tui`, "
        "`ferret admin`, or a running ingest, build or pipeline); the embedded store serves one process at a time: "
        "use that server's HTTP API or wait for the process to stop, or set FERRET_QDRANT_URL to a Qdrant server, "
        "which all processes share."
    )


def test_a_database_locked_past_the_busy_timeout_is_one_sentence(
    cli: Any, installation: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = Path(installation.settings.home) / "ferret.db"
    assert database.is_file()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(database)!r}, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            'c.execute("UPDATE api_keys SET name = name")\n'
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("FERRET_DATABASE_URL", f"sqlite:///{database}?timeout=1")
        text = one_sentence(cli("apikey", "create", "--name", "while-locked"))
    finally:
        holder.kill()
        holder.wait()
    assert "The embedded database stayed locked by another Ferret process" in text
    with sqlite3.connect(database) as connection:  # nothing half-written
        assert connection.execute("SELECT count(*) FROM api_keys WHERE name = 'while-locked'").fetchone() == (0,)
