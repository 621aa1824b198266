"""A new user's rough edges around corpora (issue 11, item 13): a wrong --path is named as the option, an empty folder
creates no corpus, FERRET_MAX_FILE_BYTES is applied and named, and `ferret corpus delete` removes a corpus from the
database and the index, in the audit trail."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.audit import list_events
from ferret.core.db.corpus import find_corpus
from ferret.core.db.engine import session_scope
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import get_settings
from ferret_testing import cli_error as error_of

runner = CliRunner()
MakeFiles = Callable[[Path, dict[str, str | bytes]], Path]


def test_a_wrong_path_is_named_as_the_option(ferret_home: Path, tmp_path: Path) -> None:
    message = error_of(["ingest", "--corpus", "kb", "--path", str(tmp_path / "nowhere")])

    assert message == f"Error: --path {tmp_path / 'nowhere'} does not exist."
    assert "'root'" not in message


def test_an_empty_folder_creates_no_corpus(ferret_home: Path, make_files: MakeFiles, tmp_path: Path) -> None:
    folder = make_files(tmp_path / "empty", {".hidden.txt": "not read", "photo.jpg": b"\xff\xd8"})

    message = error_of(["ingest", "--corpus", "kb", "--path", str(folder)])

    assert "holds no txt, md, rst, csv, html, pdf, docx, pptx or xlsx file" in message
    assert "corpus 'kb' was not created" in message
    with session_scope(get_settings().database_url) as session:
        assert find_corpus(session, "kb") is None


def test_the_size_limit_comes_from_the_setting_and_is_named(
    ferret_home: Path, make_files: MakeFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRET_MAX_FILE_BYTES", "100")
    get_settings.cache_clear()
    folder = make_files(tmp_path / "docs", {"small.txt": "Short note.", "big.txt": "x " * 100})

    result = runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)])

    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "added 1" in text and "skipped big.txt: file is 200 bytes, over the limit of 100" in text
    assert "raise FERRET_MAX_FILE_BYTES" in text


def test_corpus_delete_removes_rows_collections_and_is_audited(
    ferret_home: Path, make_files: MakeFiles, tmp_path: Path
) -> None:
    folder = make_files(tmp_path / "docs", {"a.txt": "Glaciers carve fjords.", "b.txt": "Volcanoes erupt."})
    assert runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "kb", "--promote"]).exit_code == 0
    assert runner.invoke(app, ["ingest", "--corpus", "other", "--path", str(folder)]).exit_code == 0

    assert "add --yes to confirm" in error_of(["corpus", "delete", "kb"])  # no terminal to ask on
    result = runner.invoke(app, ["corpus", "delete", "kb", "--yes"])

    assert result.exit_code == 0, result.output
    assert "deleted corpus kb: 2 documents, 2 passages, 1 index collections" in " ".join(result.output.split())
    settings = get_settings()
    with session_scope(settings.database_url) as session:
        assert find_corpus(session, "kb") is None and find_corpus(session, "other") is not None
        event = list_events(session, limit=1, action="corpus.delete")[0]
        assert (event.target, event.detail["collections"]) == ("kb", ["kb__v1"])
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        assert backend.list_collections() == [] and backend.resolve_alias("kb") is None
    finally:
        backend.close()
    assert "Corpus 'kb' does not exist" in error_of(["search", "glaciers", "--corpus", "kb"])
    # The name is free again.
    assert runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)]).exit_code == 0


def test_index_promote_takes_the_version_as_an_argument_and_scores_are_explained(
    ferret_home: Path, make_files: MakeFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11, item 12: `index promote` needed --version where `config promote` takes VERSION; hybrid scores were
    raw reciprocal-rank values with no word on what they are."""
    monkeypatch.setenv("COLUMNS", "200")
    folder = make_files(tmp_path / "docs", {"a.txt": "Glaciers carve fjords.", "b.txt": "Volcanoes erupt."})
    assert runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)]).exit_code == 0
    for _ in range(2):
        assert runner.invoke(app, ["index", "build", "--corpus", "kb"]).exit_code == 0

    assert "alias kb -> kb__v1" in runner.invoke(app, ["index", "promote", "--corpus", "kb", "1"]).output
    assert "alias kb -> kb__v2" in runner.invoke(app, ["index", "promote", "--corpus", "kb", "--version", "2"]).output
    assert "Name the version to promote" in error_of(["index", "promote", "--corpus", "kb"])

    hybrid = " ".join(runner.invoke(app, ["search", "glaciers", "--corpus", "kb"]).output.split())
    assert (
        "1.0000 filesystem: a.txt Glaciers carve fjords." in hybrid  # first in both lists: the fused score's top
        and "α·dense + (1-α)·BM25" in hybrid
        and "1 is first in both" in hybrid
    )
    sparse = " ".join(runner.invoke(app, ["search", "glaciers", "--corpus", "kb", "--mode", "sparse"]).output.split())
    assert "scores: BM25" in sparse

    # scripts read the versions as JSON; a retired version's collection is gone, so it has no points
    assert runner.invoke(app, ["index", "gc", "--corpus", "kb", "--keep", "0"]).exit_code == 0
    listed = json.loads(runner.invoke(app, ["index", "list", "--corpus", "kb", "--json"]).output)
    assert [(v["version"], v["state"], v["points"], v["via"]) for v in listed["versions"]] == [
        (1, "retired", None, "promote"),
        (2, "active", 2, "promote"),
    ]
    assert listed["activations"] == "v1 (promote), v2 (promote)"
