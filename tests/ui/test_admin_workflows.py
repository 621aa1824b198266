"""The admin's Tasks, Jobs and Synthetic data pages under ``AppTest``, against the real populated store of
conftest.py (corpus ``kb`` indexed by the real MiniLM). Jobs run for real in a thread of the test process
(embedded mode); the generator is an OpenAI-compatible endpoint on a loopback port where nothing listens, so a
launched pipeline fails at generation quickly and the page must show why."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

from ferret.core.db.corpus import create_corpus
from ferret.core.db.job import list_jobs
from ferret.core.db.models import Job, JobState, QueryStatus, SyntheticQuery
from ferret.core.db.synthetic import create_run
from ferret.core.db.task import find_task, get_task
from ferret.core.settings import get_settings
from ferret.ui.runtime import open_context
from ferret_testing import free_port

VIEWS = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin" / "views"
TIMEOUT_S = 120


def page(name: str) -> AppTest:
    return AppTest.from_file(str(VIEWS / f"{name}.py"), default_timeout=TIMEOUT_S)


def run(app: AppTest) -> AppTest:
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


def add_example(app: AppTest, search: str, title: str, query: str) -> None:
    """Search the corpus from the page, add the hit titled ``title`` and write its query."""
    app.text_input(key="example-search").input(search)
    run(app)
    hit = next(m for m in app.markdown if m.value.startswith(f"**{title}**"))
    document = hit.value.split("`")[1]
    app.button(key=f"add-docs-{document}").click()
    run(app)
    position = sum(1 for key in app.session_state["task_examples"]) - 1
    app.text_input(key=f"example-query-{position}").input(query)


def test_create_a_task_from_searched_examples_then_edit_and_export(populated_home: Path) -> None:
    app = run(page("tasks"))
    app.text_input(key="task-name").input("kb-facts")
    app.text_input(key="task-description-New task").input("Find the fact that answers a question")
    add_example(app, "capital city France", "Paris", "what is the capital of France")
    run(app)
    app.button(key="save-task").click()  # one example is not enough
    run(app)
    assert app.error[0].value == ("Task 'kb-facts' has 1 example; a few-shot task needs 2 to 8 (or make it zero-shot).")

    add_example(app, "yeast dough", "Bread", "why does bread rise")
    app.button(key="save-task").click()
    run(app)

    assert app.success[0].value == "Task kb-facts created with 2 examples."
    with open_context() as context:
        task = get_task(context.session, "kb-facts")
        assert [(e.external_id, e.query) for e in task.examples] == [
            ("paris.md", "what is the capital of France"),
            ("bread.md", "why does bread rise"),
        ]
    assert app.selectbox(key="task-choice").value == "kb-facts"

    # The prompt preview is the exact prompt of a run: both examples, then the chosen document and "Query:".
    documents = app.selectbox(key="preview-document")
    documents.select(next(label for label in documents.options if label.startswith("Espresso")))
    run(app)
    prompt = app.code[0].value
    assert "Query: what is the capital of France" in prompt and "Query: why does bread rise" in prompt
    assert prompt.rstrip().endswith("Query:")
    assert "Espresso is coffee" in prompt

    app.text_input(key="task-description-kb-facts").input("Answer trivia questions")
    app.button(key="remove-example-1").click()
    run(app)
    add_example(app, "moon gravity ocean", "Tides", "what pulls the tides")
    app.button(key="save-task").click()
    run(app)
    assert app.success[0].value == "Task kb-facts saved with 2 examples."
    with open_context() as context:
        task = get_task(context.session, "kb-facts")
        assert task.description == "Answer trivia questions"
        assert [e.external_id for e in task.examples] == ["paris.md", "tides.md"]


def test_a_new_tasks_examples_go_when_its_corpus_changes(populated_home: Path) -> None:
    with open_context() as context:
        create_corpus(context.session, "wiki")
    app = run(page("tasks"))
    app.selectbox(key="task-corpus").select("kb")
    run(app)
    app.text_input(key="task-name").input("wiki-facts")
    add_example(app, "capital city France", "Paris", "what is the capital of France")
    add_example(app, "yeast dough", "Bread", "why does bread rise")
    run(app)

    app.selectbox(key="task-corpus").select("wiki")
    run(app)

    assert app.info[0].value == (
        "The 2 examples picked from corpus kb were removed: a task's examples are documents of its own corpus, wiki."
    )
    assert app.session_state["task_examples"] == []
    app.button(key="save-task").click()
    run(app)
    assert any(error.value.startswith("Task 'wiki-facts' has 0 examples") for error in app.error)
    with open_context() as context:
        assert find_task(context.session, "wiki-facts") is None


def test_import_yaml_and_refuse_bad_yaml_in_one_sentence(populated_home: Path) -> None:
    app = run(page("tasks"))
    app.text_area(key="import-yaml").input("name: [unclosed")
    app.button(key="import-task").click()
    run(app)
    assert app.error[0].value.startswith("The YAML cannot be read:")

    app.text_area(key="import-yaml").input(
        "name: kb-imported\ncorpus: kb\nexamples:\n"
        "  - {query: largest planet, document: jupiter.md}\n"
        "  - {query: espresso brewing, document: espresso.md}\n"
    )
    app.button(key="import-task").click()
    run(app)
    assert app.success[0].value == "Imported task kb-imported with 2 examples."
    assert app.selectbox(key="task-choice").value == "kb-imported"


@pytest.mark.slow
@pytest.mark.integration
def test_try_one_generation_with_a_real_generator(populated_home: Path, use_generator: str) -> None:
    with open_context() as context:
        from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task

        create_task(
            context.session,
            TaskSpec(
                name="kb-gen",
                corpus="kb",
                examples=[
                    ExampleSpec(query="what is the capital of France", document="paris.md"),
                    ExampleSpec(query="why does bread rise", document="bread.md"),
                ],
            ),
        )
    app = run(page("tasks"))
    app.selectbox(key="task-choice").select("kb-gen")
    run(app)
    app.button(key="try-generation").click()
    run(app)
    generated = [m.value for m in app.markdown if m.value.startswith("Generated query:")]
    assert generated and len(generated[0]) > len("Generated query: ****")


@pytest.fixture
def dead_generator(monkeypatch: pytest.MonkeyPatch) -> str:
    """An LLM endpoint nobody answers: generation fails fast with a one-sentence LLMError."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("FERRET_LLM_BASE_URL", url)
    monkeypatch.setenv("FERRET_LLM_MAX_RETRIES", "0")
    get_settings.cache_clear()
    return url


def finish_the_fixtures_job() -> None:
    """The populated store's pretend-running job 1 has no thread behind it: mark it done."""
    with open_context() as context:
        job = context.session.get(Job, 1)
        assert job is not None
        job.state = JobState.SUCCEEDED


def wait_for(job_id: int) -> Job:
    with open_context() as context:
        assert context.jobs.wait(job_id, timeout_s=120)
        job = context.session.get(Job, job_id)
        assert job is not None
        return job


def test_launch_a_pipeline_that_fails_shows_the_error_then_retry(populated_home: Path, dead_generator: str) -> None:
    finish_the_fixtures_job()
    app = run(page("jobs"))
    app.selectbox(key="launch-task").select("kb-qa")
    app.number_input(key="launch-max-docs").set_value(2)
    app.button[0].click()  # the form's Launch
    run(app)
    assert app.success[0].value == "Job 2 started: pipeline of task kb-qa."

    failed = wait_for(2)
    assert failed.state == JobState.FAILED and failed.error
    run(app)
    errors = [e.value for e in app.error]
    assert errors and errors[0].startswith("Last error:")
    assert not app.button(key="retry-2").disabled and app.button(key="cancel-2").disabled

    app.button(key="retry-2").click()
    run(app)
    # The same job again (issue 11, item 10), as `ferret jobs retry 2`: no new row, its stored input reused.
    assert app.success[0].value == "Job 2 (pipeline) started again from its stored input."
    retried = wait_for(2)
    assert retried.state == JobState.FAILED and retried.attempts >= 1  # the endpoint is still dead
    assert retried.params["config"]["max_documents"] == 2 and retried.payload == failed.payload
    with open_context() as context:
        assert [job.id for job in list_jobs(context.session)] == [2, 1]


def test_cancel_a_queued_job_and_refuse_a_bad_setting(populated_home: Path) -> None:
    finish_the_fixtures_job()
    with open_context() as context:
        context.session.add(Job(kind="pipeline", state=JobState.QUEUED, params={"task": "kb-qa"}))
    app = run(page("jobs"))
    app.button(key="cancel-2").click()
    run(app)
    assert app.success[0].value == "Job 2 cancelled."

    app.selectbox(key="launch-task").select("kb-qa")
    app.text_input(key="launch-model-name").input("base")  # taken by the base model
    app.button[0].click()
    run(app)
    assert app.error[0].value == "Model version 'base' already exists; choose another model name."


def test_an_ingest_jobs_card_shows_its_own_counts(populated_home: Path) -> None:
    """The card read a sync's names (new, changed) from an ingest's counts (added, updated): 0 for 14 documents."""
    finish_the_fixtures_job()
    with open_context() as context:
        context.session.add(
            Job(
                kind="ingest",
                state=JobState.SUCCEEDED,
                progress=1.0,
                counts={"added": 14, "updated": 0, "unchanged": 2},
            )
        )
    app = run(page("jobs"))

    captions = [caption.value for caption in app.caption]
    assert "added 14 · updated 0 · unchanged 2" in captions, captions
    assert not any(caption.startswith("new 0") for caption in captions)


def test_synthetic_data_counts_reasons_and_shapes(populated_home: Path) -> None:
    with open_context() as context:
        task = get_task(context.session, "kb-qa")
        run_row = create_run(context.session, task, {"queries_per_doc": 2})
        document_ids = [d.id for d in task.corpus.documents][:2]
        rows = [
            (document_ids[0], 0, "what is the capital of france", QueryStatus.OK, None),
            (document_ids[0], 1, "paris", QueryStatus.DROPPED, "length"),
            (document_ids[1], 0, "what planet is largest", QueryStatus.OK, None),
            (document_ids[1], 1, "jupiter is the largest planet", QueryStatus.DROPPED, "round-trip: rank 4"),
            (document_ids[1], 2, "", QueryStatus.FAILED, "empty"),
        ]
        for document_id, sample, text, status, reason in rows:
            context.session.add(
                SyntheticQuery(
                    run_id=run_row.id, document_id=document_id, sample=sample, text=text, status=status, reason=reason
                )
            )
    app = run(page("synthetic"))

    assert {m.label: m.value for m in app.metric} == {"Kept": "2", "Dropped": "2", "Failed generations": "1"}
    reasons = app.dataframe[0].value
    assert sorted(zip(reasons["reason"], reasons["queries"], strict=True)) == [
        ("empty", 1),
        ("length", 1),
        ("round-trip", 1),
    ]
    assert list(app.dataframe[1].value["query"]) == ["capital of France"]  # the examples beside the charts
    assert len(app.expander) == 2  # sample queries of both documents


def test_synthetic_data_without_runs_says_what_to_do(populated_home: Path) -> None:
    app = run(page("synthetic"))
    assert app.info[0].value == "Task kb-qa has no generation run yet; launch a pipeline on the Jobs page."
