"""Helpers shared by the test folders (on pytest's path through ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def in_ci() -> bool:
    """True under CI (the ``CI`` environment variable set to anything but empty, 0, false or no)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str, remedy: str = "`make test` installs it") -> None:
    """Skip on a workstation; fail under CI, which must run every test."""
    if in_ci():
        pytest.fail(f"{reason} CI must run these tests ({remedy}).", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_process(
    command: Sequence[str], *, ready_url: str, log: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Run ``command`` (its output to ``log``) until ``ready_url`` answers 200, yield, then stop it (terminate, then
    kill). A process that exits before it is ready fails with the tail of its log."""
    with log.open("wb") as log_file:
        process = subprocess.Popen(list(command), stdout=log_file, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, f"{command[0]} did not answer {ready_url} in {timeout_s:.0f} s"
                time.sleep(0.3)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cli_error(args: Sequence[str]) -> str:
    """The one-sentence error a `ferret` command fails with (exit code 1), white space folded."""
    from typer.testing import CliRunner

    from ferret.cli.main import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    return " ".join(result.stderr.split())


@contextmanager
def logged_messages(logger_name: str) -> Iterator[list[str]]:
    """The messages that ``logger_name`` and its children hand to their handlers while the block runs: what a job's log
    would show of them (a record below the library's level never gets this far)."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, keep = logging.getLogger(logger_name), Keep()
    logger.addHandler(keep)
    try:
        yield messages
    finally:
        logger.removeHandler(keep)


def write_beir(
    root: Path,
    corpus: list[dict[str, Any]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    split: str = "test",
) -> Path:
    """A BEIR dataset folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv (with its header)."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": qid, "text": text}) + "\n" for qid, text in queries.items()), encoding="utf-8"
    )
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{qid}\t{doc_id}\t{score}" for qid, judged in qrels.items() for doc_id, score in judged.items()]
    (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def unlistable_folder(parent: Path) -> None:
    """A real folder below ``parent`` that cannot be listed, even by root: nested past PATH_MAX (4,096 bytes), so
    listing its deepest level fails with ENAMETOOLONG the way a dropped mount or an I/O error fails."""
    fd = os.open(parent, os.O_RDONLY)
    for _ in range(17):
        os.mkdir("d" * 250, dir_fd=fd)
        child = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
