"""``ferret realm pretrain`` refuses at launch what would only fail after the pre-training (a task the guard cannot
judge on, a model name that is not a folder name), and a failed run says its error once, with the resume hint only
when a resume can help. Real SQLite and the real ingest; no training runs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.corpus import get_corpus, get_or_create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.job import list_jobs
from ferret.core.db.models import RetrievalTask, TaskExample
from ferret.core.db.task import add_task
from ferret.core.pipeline.realm.state import JOB_REALM
from ferret.core.settings import get_settings
from ferret_testing import cli_error

runner = CliRunner()


def ingest(tmp_path: Path, corpus: str, documents: int) -> None:
    folder = tmp_path / corpus
    folder.mkdir()
    for n in range(documents):
        (folder / f"note-{n}.md").write_text(f"# Note {n}\n\nThe harbour of Bergen opened in {1900 + n}.")
    result = runner.invoke(app, ["ingest", "--corpus", corpus, "--path", str(folder)])
    assert result.exit_code == 0, result.output


def realm_jobs() -> int:
    with session_scope(get_settings().database_url) as session:
        return len([job for job in list_jobs(session, limit=100) if job.kind == JOB_REALM])


def test_a_task_or_model_name_that_would_fail_after_training_is_refused_at_launch(
    ferret_home: Path, tmp_path: Path
) -> None:
    ingest(tmp_path, "docs", 3)
    with session_scope(get_settings().database_url) as session:
        other = get_or_create_corpus(session, "other")
        for name, corpus_id in (("faq", get_corpus(session, "docs").id), ("elsewhere", other.id)):
            example = TaskExample(position=0, query="when did the harbour open", document_text="The harbour ...")
            add_task(session, RetrievalTask(name=name, corpus_id=corpus_id, description="d", examples=[example]))

    pretrain = ["realm", "pretrain", "--corpus", "docs", "--steps", "1"]
    assert "Task 'nope' does not exist" in cli_error([*pretrain, "--task", "nope"])
    assert "Task 'elsewhere' is a task of another corpus; give a task of corpus 'docs'." in cli_error(
        [*pretrain, "--task", "elsewhere"]
    )
    assert "Task 'faq' has no generation run yet, so the guard has no evidence from it" in cli_error(
        [*pretrain, "--task", "faq"]
    )
    for name in ("../outside", "/tmp/outside", "two words"):
        assert f"Model name {name!r} must be 1-128 letters, digits" in cli_error([*pretrain, "--model-name", name])
    assert "--eval-every must be at least 1, not 0." in cli_error([*pretrain, "--eval-every", "0"])
    assert "--mlm-warmup-steps must be 0 or more, not -1." in cli_error([*pretrain, "--mlm-warmup-steps", "-1"])
    assert realm_jobs() == 0  # each of these started a job that trained, then failed in the guard or on saving


def test_a_failed_run_says_its_error_once_and_no_resume_that_cannot_help(ferret_home: Path, tmp_path: Path) -> None:
    ingest(tmp_path, "docs", 3)  # 3 passages: too few for k=4
    result = runner.invoke(app, ["realm", "pretrain", "--corpus", "docs", "--steps", "1"])
    assert result.exit_code == 1
    output = " ".join(result.output.split())
    assert output.count("too few to retrieve k=4") == 1, output
    assert "--resume" not in output  # a resume keeps the settings that failed
    assert "ferret realm pretrain --corpus ..." not in output

    listed = runner.invoke(app, ["realm", "status"], env={"COLUMNS": "80"})
    with session_scope(get_settings().database_url) as session:
        (job,) = [job for job in list_jobs(session, limit=100) if job.kind == JOB_REALM]
    model = str(job.params["model_name"])
    assert model in listed.output  # on one line of the table, not cut to "realm-de…"
    assert f"job {job.id}: {job.error}" in " ".join(listed.output.split())  # in full below the table


def test_a_pipeline_s_model_name_that_is_not_a_folder_name_is_refused_at_launch(
    ferret_home: Path, tmp_path: Path
) -> None:
    ingest(tmp_path, "docs", 3)
    with session_scope(get_settings().database_url) as session:
        example = TaskExample(position=0, query="when did the harbour open", document_text="The harbour ...")
        add_task(
            session,
            RetrievalTask(name="faq", corpus_id=get_corpus(session, "docs").id, description="d", examples=[example]),
        )

    for name in ("../outside", "/tmp/outside", "two words"):
        error = cli_error(["pipeline", "run", "--task", "faq", "--model-name", name])
        assert f"Model name {name!r} must be 1-128 letters, digits" in error
    with session_scope(get_settings().database_url) as session:
        assert [job.kind for job in list_jobs(session, limit=100)] == ["ingest"]  # no pipeline job was started
