"""The ``ferret`` command line on a fresh FERRET_HOME: ingest, index, search, eval, and user errors.

Two entry points: ``app`` (the typer app, driven by typer's CliRunner) and ``main`` (the console script
``ferret = ferret.cli.main:main``), which is where a FerretError becomes one sentence and exit code 1.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ferret.cli.main import app, main
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret_testing import write_beir

runner = CliRunner()


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error_text(self) -> str:
        """The error message on stderr, after any progress bar, with rich's line wrapping undone."""
        text = " ".join(self.err.split())
        return text[text.find("Error: ") :] if "Error: " in text else text


RunMain = Callable[..., Outcome]


@pytest.fixture
def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> RunMain:
    """Run the console script's ``main()`` in-process with the given arguments."""

    def run(*args: str) -> Outcome:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["ferret", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


@pytest.fixture
def folder(tmp_path: Path, make_files: Callable[[Path, dict[str, str | bytes]], Path]) -> Path:
    return make_files(
        tmp_path / "docs",
        {
            "espresso.md": "# Espresso guide\n\nEspresso is brewed by forcing hot water through finely ground coffee.",
            "volcanoes.txt": "A volcano erupts when magma rises through the crust.",
            "leave.txt": "Parental leave lasts sixteen weeks at full salary.",
            "photo.jpg": b"\xff\xd8\xff\xe0 not text",
        },
    )


def assert_one_sentence_error(outcome: Outcome, *fragments: str) -> None:
    assert outcome.code == 1
    assert "Traceback" not in outcome.err + outcome.out
    assert outcome.error_text.startswith("Error: ")
    assert outcome.error_text.endswith(".")
    for fragment in fragments:
        assert fragment in outcome.error_text


def test_ingest_build_search_list(ferret_home: Path, encoder: DualEncoder, folder: Path, run_main: RunMain) -> None:
    ingested = runner.invoke(app, ["ingest", "--corpus", "docs", "--path", str(folder)])
    assert ingested.exit_code == 0, ingested.output
    assert "added 3, updated 0, unchanged 0, deleted 0" in ingested.stdout
    assert "skipped photo.jpg" in ingested.stdout
    assert "next: `ferret index build --corpus docs --promote` makes them searchable" in ingested.stdout

    built = runner.invoke(app, ["index", "build", "--corpus", "docs", "--promote"])
    assert built.exit_code == 0, built.output
    assert "built docs__v1: 3 points" in built.stdout
    assert "promoted version 1" in built.stdout

    found = runner.invoke(app, ["search", "how is espresso coffee brewed", "--corpus", "docs", "-k", "1"])
    assert found.exit_code == 0, found.output
    assert "Espresso guide" in found.stdout
    assert "volcano" not in found.stdout.lower()

    # With an active index, an ingest's changes go live and no next step is suggested.
    (folder / "volcanoes.txt").write_text("A volcano erupts when magma and gas rise through the crust.")
    updated = runner.invoke(app, ["ingest", "--corpus", "docs", "--path", str(folder)])
    assert "updated 1" in updated.stdout and "next:" not in updated.stdout, updated.output

    sparse = runner.invoke(app, ["search", "magma volcano", "--corpus", "docs", "--mode", "sparse", "-k", "1"])
    assert sparse.exit_code == 0, sparse.output
    assert "volcanoes.txt" in sparse.stdout

    as_json = runner.invoke(app, ["search", "magma volcano", "--corpus", "docs", "-k", "2", "--json"])
    assert as_json.exit_code == 0, as_json.output
    answer = json.loads(as_json.stdout)  # the HTTP API's shape: corpus, query, mode, results
    assert (answer["corpus"], answer["query"], answer["mode"]) == ("docs", "magma volcano", "hybrid")
    first = answer["results"][0]
    assert first["external_id"] == "volcanoes.txt" and "magma" in first["text"]
    assert set(first) == {
        *("document_id", "external_id", "title", "text", "score", "passage_id", "source", "metadata"),
        *("snippet", "highlights"),
    }
    assert [first["snippet"][start:end] for start, end in first["highlights"]] == ["volcano", "magma"]

    listed = runner.invoke(app, ["index", "list", "--corpus", "docs"], env={"COLUMNS": "220"})
    assert listed.exit_code == 0, listed.output
    assert "docs__v1" in listed.stdout and "active" in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if "docs__v1" in line)
    assert "(promote)" in row and "cli:" in row  # when and by whom it was made active (issue 11, item 12)
    assert "activations, oldest first: v1 (promote)" in listed.stdout

    corpora = runner.invoke(app, ["corpora"])
    assert "docs: 3 documents, 3 passages" in corpora.stdout
    sources = runner.invoke(app, ["source", "list"], env={"COLUMNS": "220"})
    row = next(line for line in sources.stdout.splitlines() if "filesystem" in line)
    assert "ingested 20" in row and "never" not in row, row  # an ingest keeps no sync report: when it ran, then

    # Only one version ever active: nothing to roll back to.
    assert_one_sentence_error(
        run_main("index", "rollback", "--corpus", "docs"),
        "Corpus 'docs' has nothing left to roll back to (version 1 is the oldest activation still ready)",
    )
    assert ferret_home.joinpath("ferret.db").is_file()


def test_config_list_shows_the_activation_history(ferret_home: Path, encoder: DualEncoder, folder: Path) -> None:
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.search_config import create_search_config
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.search.fusion import Fusion
    from ferret.runtime.context import app_context

    assert runner.invoke(app, ["ingest", "--corpus", "docs", "--path", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "docs", "--promote"]).exit_code == 0
    with app_context() as ctx:
        base = ModelRegistry(ctx.session, ctx.settings).ensure_base()
        for weight in (0.0, 1.0):
            create_search_config(ctx.session, get_corpus(ctx.session, "docs"), base, Fusion("convex", weight).to_json())
    before = runner.invoke(app, ["config", "list", "--corpus", "docs"], env={"COLUMNS": "240"})
    assert "none is active: searches use the active index with the default fusion (convex α=0.80" in before.stdout
    for args in (
        ["promote", "--corpus", "docs", "1"],
        ["promote", "--corpus", "docs", "2"],
        ["rollback", "-c", "docs"],
    ):
        done = runner.invoke(app, ["config", *args])
        assert done.exit_code == 0, done.output

    listed = runner.invoke(app, ["config", "list", "--corpus", "docs"], env={"COLUMNS": "240"})
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[1]: line for line in listed.stdout.splitlines() if line.split()[1:2] in (["1"], ["2"])}
    assert "active" in rows["1"] and "cli:" in rows["1"] and "(rollback)" in rows["1"]  # when, by whom, how
    assert "ready" in rows["2"] and "cli:" in rows["2"] and "(promote)" in rows["2"]
    assert "activations, oldest first: v1 (promote), v2 (promote), v1 (rollback)" in listed.stdout
    assert "none is active" not in listed.stdout

    as_json = runner.invoke(app, ["config", "list", "--corpus", "docs", "--json"])
    assert as_json.exit_code == 0, as_json.output
    listing = json.loads(as_json.stdout)
    assert listing["activations"] == "v1 (promote), v2 (promote), v1 (rollback)"
    by_version = {row["version"]: row for row in listing["configurations"]}
    assert (by_version[1]["active"], by_version[1]["via"], by_version[2]["via"]) == (True, "rollback", "promote")
    assert by_version[2]["fusion"].startswith("convex α=1.00") and by_version[1]["activated_by"].startswith("cli:")


def test_rollback_of_an_unknown_corpus_is_one_sentence(ferret_home: Path, run_main: RunMain) -> None:
    assert_one_sentence_error(run_main("index", "rollback", "--corpus", "nope"), "Corpus 'nope' does not exist")


def test_rollback_with_nothing_to_roll_back_is_one_sentence(ferret_home: Path, folder: Path, run_main: RunMain) -> None:
    assert run_main("ingest", "--corpus", "docs", "--path", str(folder)).code == 0

    outcome = run_main("index", "rollback", "--corpus", "docs")

    assert_one_sentence_error(outcome, "nothing left to roll back to (no version is active)")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["search", "q", "--corpus", "docs", "--mode", "fuzzy"], "Search mode 'fuzzy' is not one of"),
        (["search", "q", "--corpus", "nope"], "Corpus 'nope' does not exist"),
        (["ingest", "--corpus", "docs"], "Give exactly one of --path DIR or --beir DIR."),
        (["ingest", "--corpus", "Bad Name!", "--path", "."], "Corpus name 'Bad Name!' is not valid"),
        (["eval", "--dataset", "/no/such/folder"], "does not exist"),
        (["pipeline", "run", "--task", "t", "--base-weight", "2"], "The base weight must be between 0 and 1."),
        (
            ["pipeline", "run", "--task", "t", "--hard-negatives", "dense"],
            "Hard negatives must be 'none', 'bm25' or 'residual'",
        ),
        (
            ["pipeline", "run", "--task", "t", "--logprob-quantile", "1.5"],
            "The log-probability quantile must be above 0 and below 1.",
        ),
        (["pipeline", "run", "--task", "t", "--round-trip-k", "0"], "The round-trip K must be at least 1."),
        (
            ["pipeline", "run", "--task", "t", "--distill"],
            "Distillation needs the reranker (--reranker): it is the teacher.",
        ),
        (["pipeline", "run", "--task", "t", "--no-promote", "--force-promote"], "Give at most one of --no-promote"),
    ],
)
def test_user_errors_are_one_sentence_and_exit_1(
    ferret_home: Path, run_main: RunMain, args: list[str], fragment: str
) -> None:
    assert_one_sentence_error(run_main(*args), fragment)


def test_eval_prints_the_table_and_writes_json(
    ferret_home: Path, encoder: DualEncoder, tiny_beir: Path, tmp_path: Path
) -> None:
    report = tmp_path / "out" / "eval.json"
    report.parent.mkdir()

    result = runner.invoke(app, ["eval", "--dataset", str(tiny_beir), "--json", str(report)])

    assert result.exit_code == 0, result.output
    for text in ("tiny-beir (test)", "nDCG@10", "Recall@100", "MRR@10", "bm25s", "dense", "sparse", "hybrid"):
        assert text in result.stdout
    rows = json.loads(report.read_text())
    assert [(row["system"], row["model"], row["mode"]) for row in rows] == [
        ("bm25s", None, None),
        ("ferret", "base", "dense"),
        ("ferret", "base", "sparse"),
        ("ferret", "base", "hybrid"),
    ]
    for row in rows:
        assert row["queries"] == 4
        assert set(row["metrics"]) == {"ndcg@10", "recall@100", "mrr@10"}
        assert row["metrics"]["mrr@10"] >= 50.0  # every query names its document plainly

    again = runner.invoke(app, ["eval", "--dataset", str(tiny_beir)])  # the second run reuses corpus and index
    assert again.exit_code == 0, again.output
    assert "indexing" not in again.stderr

    # Every long command is a job row (issue 11, item 10): both runs are in `ferret jobs list`, with their results.
    jobs = runner.invoke(app, ["jobs", "list"], env={"COLUMNS": "200"})
    assert jobs.exit_code == 0, jobs.output
    assert len([line for line in jobs.stdout.splitlines() if " eval " in f" {line} " and "succeeded" in line]) == 2


def test_eval_reads_a_dataset_already_ingested_under_another_source_name(
    ferret_home: Path, encoder: DualEncoder, tiny_beir: Path, run_main: RunMain
) -> None:
    """The quickstart ingests its demo as source ``demo`` and then evaluates it in the same corpus: the evaluation
    used to ingest the same files again as source ``beir``, and every search showed each document twice."""
    assert run_main("ingest", "-c", "b", "--beir", str(tiny_beir), "--source", "mine").code == 0

    outcome = run_main("eval", "--dataset", str(tiny_beir), "--corpus", "b")

    assert outcome.code == 0, outcome.out
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        counts = connection.execute(
            "SELECT source, COUNT(*), COUNT(DISTINCT external_id) FROM documents GROUP BY source"
        ).fetchall()
    lines = (tiny_beir / "corpus.jsonl").read_text().splitlines()
    assert counts == [("mine", len(lines), len(lines))]


def test_eval_judges_a_corpus_already_held_with_only_queries_and_qrels(
    ferret_home: Path, encoder: DualEncoder, folder: Path, tmp_path: Path, run_main: RunMain
) -> None:
    """An admin's own labelled queries for a folder Ferret indexed: no corpus.jsonl, qrels name the files' paths."""
    assert run_main("ingest", "--corpus", "docs", "--path", str(folder)).code == 0
    queries = {"q1": "how is espresso brewed", "q2": "how long is parental leave", "q3": "why do volcanoes erupt"}
    qrels = {"q1": {"espresso.md": 1}, "q2": {"leave.txt": 1}, "q3": {"volcanoes.txt": 1}}
    labels = write_beir(tmp_path / "labels", [], queries, qrels)
    (labels / "corpus.jsonl").unlink()
    report = tmp_path / "eval.json"

    outcome = run_main("eval", "--dataset", str(labels), "--corpus", "docs", "--json", str(report))

    assert outcome.code == 0, outcome.out + outcome.err
    rows = json.loads(report.read_text())
    assert [(row["system"], row["mode"], row["queries"]) for row in rows] == [
        ("bm25s", None, 3),
        ("ferret", "dense", 3),
        ("ferret", "sparse", 3),
        ("ferret", "hybrid", 3),
    ]
    assert all(row["metrics"]["mrr@10"] == 100.0 for row in rows), rows  # each query names its file plainly
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        sources = connection.execute("SELECT DISTINCT source FROM documents").fetchall()
    assert sources == [("filesystem",)]  # nothing was ingested from the labelled set
    assert "note:" not in outcome.out

    # a label naming a document the corpus lacks costs every score: said under the table
    (labels / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tespresso.md\t1\nq2\tleave.txt\t1\nq3\tvolcanoes.txt\t1\nq3\tgone.md\t1\n"
    )
    noted = run_main("eval", "--dataset", str(labels), "--corpus", "docs")
    assert noted.code == 0 and " ".join(noted.out.split()).endswith(
        "note: 1 document judged in qrels/test.tsv is not in the corpus (such as 'gone.md'): no system can find "
        "it, so every score is lower than the search deserves"
    )

    # qrels that name no document of the corpus would score 0 everywhere: refused, with an id of the corpus
    (labels / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdocs/espresso.md\t1\n")
    assert_one_sentence_error(
        run_main("eval", "--dataset", str(labels), "--corpus", "docs"),
        "None of the 1 documents judged in qrels/test.tsv is in the corpus",
        "such as 'espresso.md'",
    )
    # ...and without a corpus to judge, the set is refused before any job starts
    assert_one_sentence_error(
        run_main("eval", "--dataset", str(labels)), "has no documents (corpus.jsonl is missing or empty)"
    )


@pytest.mark.parametrize("command", ["eval", "ingest"])
def test_a_bad_beir_line_names_the_file_and_line(
    ferret_home: Path, tiny_beir: Path, run_main: RunMain, command: str
) -> None:
    corpus_file = tiny_beir / "corpus.jsonl"
    lines = corpus_file.read_text().splitlines()
    lines[2] = '{"_id": "d3", "title": "Jupiter", "text": '  # cut off mid-line
    corpus_file.write_text("\n".join(lines) + "\n")
    args = (
        ["eval", "--dataset", str(tiny_beir)] if command == "eval" else ["ingest", "-c", "b", "--beir", str(tiny_beir)]
    )

    outcome = run_main(*args)

    assert_one_sentence_error(outcome, "corpus.jsonl line 3", "not valid JSON")
    if command == "ingest":  # the failed first ingest leaves no empty corpus behind
        listed = run_main("corpora")
        assert listed.code == 0 and "b:" not in listed.out, listed.out
        assert "no corpus yet: `ferret ingest --corpus NAME --path DIR` makes one" in listed.out  # not a blank


def test_the_typer_app_reports_ferret_errors_as_one_sentence(ferret_home: Path) -> None:
    result = runner.invoke(app, ["index", "rollback", "--corpus", "nope"])

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "Corpus 'nope' does not exist" in " ".join(result.stderr.split())


@pytest.mark.parametrize("args", [["search", "q"], ["no-such-command"], []], ids=["missing-option", "unknown", "bare"])
def test_usage_errors_print_usage_not_a_traceback(ferret_home: Path, run_main: RunMain, args: list[str]) -> None:
    outcome = run_main(*args)

    assert outcome.code == 2
    assert "Traceback" not in outcome.err
    assert "Usage" in outcome.err + outcome.out


def test_help_exits_0(ferret_home: Path, run_main: RunMain) -> None:
    outcome = run_main("--help")

    assert outcome.code == 0
    assert "ingest" in outcome.out and "quickstart" in outcome.out


@pytest.mark.slow
def test_quickstart_runs_end_to_end(tmp_path: Path) -> None:
    home = tmp_path / "quickstart-home"
    env = {key: value for key, value in os.environ.items() if not key.startswith("FERRET_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "160"})

    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ferret.cli.main import main; main()",
            "quickstart",
            "--home",
            str(home),
            "--no-train",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    assert "Ferret quickstart" in out
    assert "Which team won Super Bowl 50?" in out
    assert "CPU-seconds, load average" in out  # wall time alone cannot be read on shared cores
    for text in ("nDCG@10", "Recall@100", "MRR@10", "bm25s", "dense", "sparse", "hybrid"):
        assert text in out
    assert (home / "ferret.db").is_file()
    assert (home / "qdrant" / "collections" / "demo__v1").is_dir()
    with sqlite3.connect(home / "ferret.db") as connection:  # each long step a job row (issue 11, item 10)
        jobs = connection.execute("SELECT kind, state FROM jobs ORDER BY id").fetchall()
    assert jobs == [("ingest", "succeeded"), ("index_build", "succeeded"), ("eval", "succeeded")]
    with sqlite3.connect(home / "ferret.db") as connection:  # the evaluation reads the demo it did not ingest again
        documents = connection.execute("SELECT COUNT(*), COUNT(DISTINCT external_id) FROM documents").fetchone()
    assert documents == (288, 288)


@pytest.mark.parametrize(
    ("env", "sentence"),
    [
        (
            {"FERRET_SEARCH_MODE": "bogus"},
            "Error: Invalid setting FERRET_SEARCH_MODE='bogus': Input should be 'dense', 'sparse' or 'hybrid'.",
        ),
        (
            {"FERRET_MAX_PASSAGE_TOKENS": "abc"},
            "Error: Invalid setting FERRET_MAX_PASSAGE_TOKENS='abc': Input should be a valid integer, unable to parse "
            "string as an integer.",
        ),
        (
            {"FERRET_DATABASE_URL": "garbage"},
            "Error: FERRET_DATABASE_URL is not a database URL (Could not parse SQLAlchemy URL from given URL string); "
            "e.g. postgresql+psycopg://user:pass@host/db.",
        ),
        (  # nothing listens on port 1: a real connection attempt, refused
            {"FERRET_DATABASE_URL": "postgresql+psycopg://ferret:secret@127.0.0.1:1/ferret"},
            # *: the driver's own words before its reason
            "Error: Cannot connect to the database of FERRET_DATABASE_URL (*Connection refused); is it running and "
            "reachable?",
        ),
    ],
)
def test_an_installation_mistake_is_one_sentence(
    run_main: RunMain, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], sentence: str
) -> None:
    """The first mistakes of an install (a setting's value, the database's address) printed 80 to 390 lines of
    traceback; bugs still keep theirs."""
    from ferret.core.settings import get_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()

    outcome = run_main("corpora")

    assert outcome.code == 1 and "Traceback" not in outcome.err
    assert fnmatch.fnmatchcase(outcome.error_text, sentence), outcome.error_text


def test_a_ferret_home_that_cannot_be_a_folder_is_one_sentence(
    run_main: RunMain, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ferret.core.settings import get_settings

    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("FERRET_HOME", str(tmp_path / "a-file"))
    monkeypatch.setenv("COLUMNS", "1000")  # a long temporary path must not be wrapped inside the sentence
    get_settings.cache_clear()

    outcome = run_main("corpora")

    assert outcome.code == 1
    assert outcome.error_text == (
        f"Error: FERRET_HOME {tmp_path / 'a-file'} cannot hold Ferret's data (File exists: {tmp_path / 'a-file'}); "
        "point it at a writable folder."
    )
