"""The real thing: `ferret apikey create` prints a key, `ferret serve` (uvicorn in a subprocess) answers a search
over HTTP with it, and a revoked key is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret_testing import free_port


@pytest.fixture
def home(
    tmp_path_factory: pytest.TempPathFactory, make_installation: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    from ferret.core.settings import get_settings

    home = tmp_path_factory.mktemp("serve-home")
    make_installation(home)
    monkeypatch.setenv("FERRET_HOME", str(home))
    monkeypatch.delenv("FERRET_DATABASE_URL", raising=False)
    monkeypatch.delenv("FERRET_QDRANT_URL", raising=False)
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


def test_apikey_commands_and_serve(home: Path) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["apikey", "create", "--name", "portal", "--scope", "search", "--group", "a"])
    assert created.exit_code == 0, created.output
    key = created.output.strip().splitlines()[-1]
    assert key.startswith("fk_")
    listed = runner.invoke(app, ["apikey", "list"])
    assert "portal" in listed.output and key not in listed.output
    assert runner.invoke(app, ["apikey", "create", "--name", "portal"]).exit_code == 1
    bad_scope = runner.invoke(app, ["apikey", "create", "--name", "other", "--scope", "root"])
    assert bad_scope.exit_code == 1 and "Unknown scope 'root'" in bad_scope.output
    refused = runner.invoke(app, ["serve", "--workers", "2"])
    assert refused.exit_code == 1 and "one process only" in refused.output

    port = free_port()
    env = {**os.environ, "FERRET_HOME": str(home)}
    serve = ["serve", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(
        [sys.executable, "-c", "from ferret.cli.main import main; main()", *serve],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, server.stdout.read().decode() if server.stdout else ""
            assert time.monotonic() < deadline, "ferret serve did not answer /health in time"
            time.sleep(0.3)
        response = httpx.post(
            f"{base}/v1/corpora/kb/search",
            json={"query": "volcano budget", "k": 10},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert {hit["external_id"] for hit in response.json()["results"]} == {"pub-1", "pub-2", "a-1", "a-2", "ab-1"}

        assert runner.invoke(app, ["apikey", "revoke", "portal"]).exit_code == 0
        again = httpx.post(
            f"{base}/v1/corpora/kb/search", json={"query": "volcano"}, headers={"X-API-Key": key}, timeout=60
        )
        assert again.status_code == 401
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded machine: do not leave the server behind
            server.kill()
            server.wait()
