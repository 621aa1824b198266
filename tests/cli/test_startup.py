"""CLI start-up (issue 11, items 9 and 12): the ML stack is imported only by the commands that use it, and the help
lists commands in a new user's order with placeholders that name the value, not its Python type.

The import checks run in a fresh interpreter: this test process has imported torch long before (conftest)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from ferret.cli.main import LAZY_COMMANDS, app
from ferret.core.db.engine import session_scope
from ferret.core.db.models import Job
from ferret.core.settings import FerretSettings

ML_MODULES = ("torch", "transformers", "sentence_transformers")
"""What made every command take 8-30 s to start; none of it is needed to parse arguments or print help."""


def modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The top-level modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, timeout=300
    )
    return set(json.loads(completed.stdout.splitlines()[-1]))


def test_importing_the_cli_imports_no_ml_library() -> None:
    loaded = modules_after("import ferret.cli.main")

    assert not loaded & set(ML_MODULES), sorted(loaded & set(ML_MODULES))
    assert "sqlalchemy" not in loaded and "qdrant_edge" not in loaded  # nor the stores: --help touches none


def test_help_imports_no_command_module() -> None:
    loaded = modules_after(
        "import contextlib, io\nfrom ferret.cli.main import app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    app(['--help'])"
    )

    assert not loaded & {*ML_MODULES, "sqlalchemy", "pydantic_settings"}, sorted(loaded)


def test_no_command_module_imports_an_ml_library_before_it_runs() -> None:
    """A group's ``--help`` and its listings import the group's module: ``ferret task list`` took 4 s when the
    module imported the round-trip retrievers (and torch) at its top; the command that filters imports them."""
    modules = sorted({spec.target.partition(":")[0] for spec in LAZY_COMMANDS})
    loaded = modules_after("\n".join(f"import {module}" for module in modules))

    assert not loaded & set(ML_MODULES), sorted(loaded & set(ML_MODULES))


def test_searches_import_no_ml_library(
    ferret_home: Path, make_files: Callable[[Path, dict[str, str | bytes]], Path]
) -> None:
    """Torch is imported where a model is loaded: a BM25 (sparse) search loads none, a listing neither, and a hybrid
    or dense search encodes its query with the ONNX export made by the index build (issue 11, item 9)."""
    runner = CliRunner()
    folder = make_files(ferret_home.parent / "docs", {"glaciers.txt": "Glaciers carve fjords over millennia."})
    assert runner.invoke(app, ["ingest", "--corpus", "c", "--path", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "c", "--promote"]).exit_code == 0
    env = {**os.environ, "FERRET_HOME": str(ferret_home)}

    for command, shown in (
        (["search", "glaciers", "--corpus", "c", "--mode", "sparse"], "Glaciers carve"),
        (["index", "list", "--corpus", "c"], "active"),
        (["jobs", "list"], "kind"),  # it imported the job catalogue's pipelines, torch with them: 5 s
        (["config", "list", "--corpus", "c"], "none is active"),
        (["search", "glaciers", "--corpus", "c"], "Glaciers carve"),
        (["search", "glaciers", "--corpus", "c", "--mode", "dense"], "Glaciers carve"),
    ):
        code = (
            "import contextlib, io\nfrom ferret.cli.main import app\nout = io.StringIO()\n"
            f"with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n    app({command!r})\n"
            f"assert {shown!r} in out.getvalue(), out.getvalue()"
        )
        loaded = modules_after(code, env)
        assert not loaded & set(ML_MODULES), (command, sorted(loaded & set(ML_MODULES)))
        assert ("onnxruntime" in loaded) == (command[0] == "search" and "sparse" not in command), command


def test_the_job_catalogue_imports_no_ml_library() -> None:
    """Every face that starts, retries or cancels a job reads the catalogue; the stage functions that import torch
    are named by ``StageBody`` and imported only when a stage runs (it took 2-3 s of every ``--async``). ``ferret
    pipeline run`` imports the in-process driver and the result it prints, not the stages either."""
    loaded = modules_after(
        "import ferret.core.jobs.catalog\nimport ferret.workers.dispatch\nimport ferret.cli.pipeline_commands"
    )

    assert not loaded & set(ML_MODULES), sorted(loaded & set(ML_MODULES))


def test_an_async_index_build_imports_no_ml_library(
    ferret_home: Path, make_files: Callable[[Path, dict[str, str | bytes]], Path]
) -> None:
    """``--async`` only checks the inputs and starts the job: in embedded mode a detached runner builds the index
    (and imports torch), the command's own process imports none of it."""
    runner = CliRunner()
    folder = make_files(ferret_home.parent / "docs", {"glaciers.txt": "Glaciers carve fjords over millennia."})
    assert runner.invoke(app, ["ingest", "--corpus", "c", "--path", str(folder)]).exit_code == 0
    code = (
        "import contextlib, io\nfrom ferret.cli.main import app\nout = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    app(['index', 'build', '--corpus', 'c', '--async'])\n"
        "assert 'started in a detached local runner' in out.getvalue(), out.getvalue()"
    )

    loaded = modules_after(code, {**os.environ, "FERRET_HOME": str(ferret_home)})

    assert not loaded & set(ML_MODULES), sorted(loaded & set(ML_MODULES))
    with session_scope(FerretSettings(home=ferret_home).database_url) as session:
        job = session.scalars(select(Job).where(Job.kind == "index_build")).one()
    followed = runner.invoke(app, ["jobs", "follow", str(job.id)])  # no runner outlives the test
    assert followed.exit_code == 0, followed.output


def test_each_listed_line_is_the_command_s_own_help() -> None:
    """The lazy listing repeats each command's first help paragraph; this keeps the two from drifting apart."""
    for spec in LAZY_COMMANDS:
        command = spec.load()
        assert command.name == spec.name
        assert " ".join((command.help or "").split("\n\n")[0].split()) == spec.help, spec.name


def _all_commands(command: Any, path: list[str]) -> Iterator[list[str]]:
    yield path
    if hasattr(command, "list_commands"):
        ctx = typer.Context(command)
        for name in command.list_commands(ctx):
            yield from _all_commands(command.get_command(ctx, name), [*path, name])


def test_help_order_and_placeholders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    top = runner.invoke(app, ["--help"]).output
    listed = re.findall(r"^│ ([a-z]+) ", top, flags=re.MULTILINE)
    assert listed[:7] == ["quickstart", "ingest", "source", "corpora", "corpus", "index", "search"]
    assert listed.index("search") < listed.index("serve") and listed.index("search") < listed.index("worker")

    commands = list(_all_commands(typer.main.get_command(app), []))
    assert len(commands) > 40  # every group and its subcommands
    for path in commands:
        output = runner.invoke(app, [*path, "--help"]).output
        for placeholder in ("<str>", "<int>", "<bool>", "<float>", "<path>", "<list["):
            assert placeholder not in output.lower(), (path, placeholder)
    search_help = runner.invoke(app, ["search", "--help"]).output
    assert "QUERY" in search_help and "CORPUS" in search_help and "GROUP" in search_help
