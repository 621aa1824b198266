"""Tasks: create, import and export as YAML, every bad input as one sentence, and the `ferret task` commands."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.models import Corpus, Document, RetrievalTask, TaskExample
from ferret.core.db.task import example_document, get_task
from ferret.core.errors import ConflictError, FerretError, InvalidInputError, NotFoundError
from ferret.core.synth.task_spec import (
    PLACEHOLDER_QUERY,
    ExampleSpec,
    TaskSpec,
    create_task,
    dump_task_spec,
    load_task_spec,
    parse_task_spec,
    task_to_spec,
)

runner = CliRunner()

TASK_YAML = """\
name: facts-questions
corpus: facts
description: Questions a curious reader asks about a fact.
e_doc: Fact
e_query: Question
generation:
  queries_per_doc: 4
  max_documents: 6
  seed: 7
examples:
  - query: What is the capital of France?
    document: d1
  - query: How do plants make sugar?
    document: d2
  - query: Why is the sky blue?
    document_text: The sky is blue because air scatters blue light more than red light.
"""


def _spec(**changes: Any) -> TaskSpec:
    base = TaskSpec(
        name="facts-questions",
        corpus="facts",
        examples=[
            ExampleSpec(query="What is the capital of France?", document="d1"),
            ExampleSpec(query="How do plants make sugar?", document="d2"),
        ],
    )
    return base.model_copy(update=changes)


def _count(session: Session, model: type[Any]) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


def test_import_export_round_trip(session: Session, corpus: Corpus, tmp_path: Path) -> None:
    source = tmp_path / "task.yaml"
    source.write_text(TASK_YAML)

    task = create_task(session, load_task_spec(source))

    assert [example.position for example in task.examples] == [1, 2, 3]
    assert task.examples[0].document_id is not None and task.examples[0].external_id == "d1"
    assert task.examples[2].document_id is None and task.examples[2].document_text is not None
    assert task.generation == {
        "queries_per_doc": 4,
        "max_documents": 6,
        "temperature": 0.7,
        "max_tokens": 48,
        "seed": 7,
        "example_chars": 250,
    }
    exported = dump_task_spec(task_to_spec(task))
    data = yaml.safe_load(exported)
    original = yaml.safe_load(TASK_YAML)
    assert data["examples"][0] == {**original["examples"][0], "source": "beir"}
    assert data["examples"][2] == original["examples"][2]
    assert data["generation"] == {**original["generation"], "temperature": 0.7, "max_tokens": 48, "example_chars": 250}
    assert {key: data[key] for key in ("name", "corpus", "description", "e_doc", "e_query", "zero_shot")} == {
        "name": "facts-questions",
        "corpus": "facts",
        "description": "Questions a curious reader asks about a fact.",
        "e_doc": "Fact",
        "e_query": "Question",
        "zero_shot": False,
    }

    # The exported file imports again, under another name, to the same task.
    data["name"] = "facts-copy"
    copy = create_task(session, parse_task_spec(data))
    again = task_to_spec(copy).model_dump()
    assert again == {**task_to_spec(task).model_dump(), "name": "facts-copy"}


def test_zero_shot_task_has_no_examples(session: Session, corpus: Corpus) -> None:
    task = create_task(session, _spec(zero_shot=True, examples=[]))
    assert task.zero_shot and task.examples == []
    assert yaml.safe_load(dump_task_spec(task_to_spec(task)))["zero_shot"] is True


def _examples(count: int) -> list[ExampleSpec]:
    return [ExampleSpec(query=f"question {i}", document=f"d{i % 9 + 2}") for i in range(count)]


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"examples": _examples(1)}, InvalidInputError, "has 1 example; a few-shot task needs 2 to 8"),
        ({"examples": _examples(9)}, InvalidInputError, "has 9 examples; a few-shot task needs 2 to 8"),
        ({"examples": []}, InvalidInputError, "has 0 examples; a few-shot task needs 2 to 8 (or make it zero-shot)"),
        ({"zero_shot": True}, InvalidInputError, "is zero-shot but has 2 examples"),
        (
            {"examples": [ExampleSpec(query="q one", document="d1"), ExampleSpec(query="q two", document="d99")]},
            InvalidInputError,
            "Example 2's document 'd99' is not in corpus 'facts'",
        ),
        (
            {"examples": [ExampleSpec(query="  ", document="d1"), ExampleSpec(query="q two", document="d2")]},
            InvalidInputError,
            "Example 1 has an empty query",
        ),
        (
            {"examples": [ExampleSpec(query="q", document="d1", document_text="x"), *_examples(1)]},
            InvalidInputError,
            "Example 1 needs exactly one of 'document'",
        ),
        (
            {"examples": [ExampleSpec(query="q"), *_examples(1)]},
            InvalidInputError,
            "Example 1 needs exactly one of 'document'",
        ),
        (
            {"examples": [ExampleSpec(query="q", document="d1", source="web"), *_examples(1)]},
            InvalidInputError,
            "Example 1's document 'd1' is not in corpus 'facts' in source 'web'",
        ),
        ({"corpus": "nope"}, NotFoundError, "Corpus 'nope' does not exist"),
        ({"name": "Bad Name"}, InvalidInputError, "Task name 'Bad Name' is not valid"),
        ({"e_doc": "Doc: x"}, InvalidInputError, "must be a short one-line description without ':'"),
        ({"e_query": ""}, InvalidInputError, "must be a short one-line description"),
    ],
)
def test_bad_tasks_are_one_sentence_and_write_nothing(
    session: Session, corpus: Corpus, changes: dict[str, Any], error: type[FerretError], message: str
) -> None:
    with pytest.raises(error) as raised:
        create_task(session, _spec(**changes))
    assert message in str(raised.value)
    assert str(raised.value).endswith(".")
    assert _count(session, RetrievalTask) == 0
    assert _count(session, TaskExample) == 0


def test_duplicate_task_name(session: Session, corpus: Corpus) -> None:
    create_task(session, _spec())
    with pytest.raises(ConflictError, match="Task 'facts-questions' already exists"):
        create_task(session, _spec())
    assert _count(session, RetrievalTask) == 1


def test_an_id_in_two_sources_needs_the_source(
    session: Session, corpus: Corpus, insert_documents: Callable[..., None]
) -> None:
    insert_documents(session, corpus, [("d1", "Lyon", "Lyon is a city in France.")], source="web")
    with pytest.raises(InvalidInputError, match=r"is in several sources of corpus 'facts' \(beir, web\); add 'source'"):
        create_task(session, _spec())
    examples = [ExampleSpec(query="Where is Lyon?", document="d1", source="web"), *_examples(1)]
    task = create_task(session, _spec(examples=examples))
    assert task.examples[0].source == "web"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "is not valid YAML near line 1"),
        ("- just a list", "must be a mapping"),
        ("name: x\ncorpus: facts\nexampels: []\n", "is not valid at 'exampels': Extra inputs are not permitted."),
        (
            "name: x\ncorpus: facts\nexamples:\n  - query: q\n    documnet: d1\n",
            "is not valid at 'examples[1].documnet'",
        ),
        ("name: x\ncorpus: facts\ngeneration:\n  queries_per_doc: 9\n", "at 'generation.queries_per_doc'"),
    ],
)
def test_bad_task_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInputError) as raised:
        load_task_spec(path)
    assert message in str(raised.value)


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_task_spec(tmp_path / "nope.yaml")


def test_example_finds_its_document_after_a_reingest_replaced_it(session: Session, corpus: Corpus) -> None:
    task = create_task(session, _spec())
    session.commit()
    old = session.scalars(select(Document).where(Document.external_id == "d1")).one()
    session.execute(delete(Document).where(Document.id == old.id))
    session.add(
        Document(
            corpus_id=corpus.id,
            source="beir",
            external_id="d1",
            title="Paris",
            body="Paris, capital of France.",
            content_hash=hashlib.sha256(b"new").hexdigest(),
        )
    )
    session.commit()
    session.expire_all()
    example = get_task(session, task.name).examples[0]
    assert example.document_id is None  # ON DELETE SET NULL
    document = example_document(session, task, example)
    assert document is not None and document.body == "Paris, capital of France."
    assert example.document_id == document.id


def test_cli_create_list_show_export_import_delete(session: Session, corpus: Corpus, tmp_path: Path) -> None:
    created = runner.invoke(
        app,
        [
            "task", "create", "--corpus", "facts", "--name", "facts-q", "--description", "Fact questions",
            "--e-doc", "Fact", "--e-query", "Question",
            "--example", "What is the capital of France?=>d1",
            "--example", "How do plants make sugar?=>d2",
            "--queries-per-doc", "2",
        ],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    assert "created task facts-q on corpus facts with 2 examples" in created.output

    exported = tmp_path / "facts-q.yaml"
    assert runner.invoke(app, ["task", "export", "facts-q", "-o", str(exported)]).exit_code == 0
    data = yaml.safe_load(exported.read_text())
    assert data["e_doc"] == "Fact" and data["generation"]["queries_per_doc"] == 2
    assert [example["document"] for example in data["examples"]] == ["d1", "d2"]
    printed = runner.invoke(app, ["task", "export", "facts-q"])
    assert yaml.safe_load(printed.stdout) == data

    data["name"] = "facts-r"
    exported.write_text(yaml.safe_dump(data))
    imported = runner.invoke(app, ["task", "import", str(exported)])
    assert imported.exit_code == 0, imported.output

    listed = runner.invoke(app, ["task", "list"])
    assert listed.exit_code == 0 and "facts-q" in listed.stdout and "facts-r" in listed.stdout
    shown = runner.invoke(app, ["task", "show", "facts-q"])
    assert shown.exit_code == 0 and "What is the capital of France?" in shown.stdout

    assert runner.invoke(app, ["task", "delete", "facts-r"]).exit_code == 0
    session.rollback()
    assert session.scalars(select(RetrievalTask.name)).all() == ["facts-q"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["task", "create", "--corpus", "facts", "--name", "x", "--example", "no arrow"], "must look like"),
        (["task", "create", "--corpus", "facts", "--name", "x", "--example", "q=>d1"], "has 1 example"),
        (["task", "create", "--corpus", "facts", "--name", "x", "--zero-shot", "--queries-per-doc", "9"], "--queries"),
        (["task", "show", "nope"], "Task 'nope' does not exist"),
        (["task", "import", "/no/such.yaml"], "does not exist"),
    ],
)
def test_cli_errors_are_one_sentence(session: Session, corpus: Corpus, args: list[str], fragment: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "Traceback" not in text
    assert "Error:" in text and fragment in text


def test_whole_examples_survive_export_and_import(session: Session, corpus: Corpus, tmp_path: Path) -> None:
    """``example_chars: null`` (whole examples) is written out, not dropped: a dropped key would import as the
    default (250 characters) and change the prompt."""
    source = tmp_path / "task.yaml"
    source.write_text(TASK_YAML.replace("  seed: 7\n", "  seed: 7\n  example_chars: null\n"))
    task = create_task(session, load_task_spec(source))
    assert task.generation is not None and task.generation["example_chars"] is None

    data = yaml.safe_load(dump_task_spec(task_to_spec(task)))
    data["name"] = "facts-whole"
    copy = create_task(session, parse_task_spec(data))

    assert data["generation"]["example_chars"] is None
    assert task_to_spec(copy).generation.example_chars is None


def test_update_task_replaces_its_examples_in_place(session: Session, corpus: Corpus) -> None:
    from ferret.core.synth.task_spec import update_task

    two = [ExampleSpec(query="capital of France", document="d1"), ExampleSpec(query="why bread rises", document="d9")]
    task = create_task(session, TaskSpec(name="edit-me", corpus="facts", examples=two))
    session.commit()
    task_id = task.id

    three = [*two[::-1], ExampleSpec(query="great red spot", document="d3")]
    update_task(session, task, TaskSpec(name="edit-me", corpus="facts", description="Trivia", examples=three))
    session.commit()

    session.expire_all()
    edited = get_task(session, "edit-me")
    assert edited.id == task_id and edited.description == "Trivia"
    assert [(e.position, e.external_id) for e in edited.examples] == [(1, "d9"), (2, "d1"), (3, "d3")]
    with pytest.raises(InvalidInputError, match="has 1 example"):
        update_task(session, edited, TaskSpec(name="edit-me", corpus="facts", examples=three[:1]))
    with pytest.raises(InvalidInputError, match="name and corpus cannot change"):
        update_task(session, edited, TaskSpec(name="renamed", corpus="facts", examples=three))
    session.rollback()
    assert [e.external_id for e in get_task(session, "edit-me").examples] == ["d9", "d1", "d3"]


def test_every_bad_key_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("name: x\ncorpus: facts\nexampels: []\ndescriptoin: Questions\n")

    with pytest.raises(InvalidInputError) as raised:
        load_task_spec(path)

    assert str(raised.value) == (
        f"Task file {path} has 2 problems: at 'exampels': Extra inputs are not permitted; "
        "at 'descriptoin': Extra inputs are not permitted."
    )


def test_an_example_id_without_its_extension_gets_a_suggestion(
    session: Session, corpus: Corpus, insert_documents: Callable[..., None]
) -> None:
    insert_documents(session, corpus, [("hr/leave-policy.txt", "Leave", "Parental leave lasts 16 weeks.")])
    examples = [ExampleSpec(query="How long is parental leave?", document="leave-policy"), *_examples(1)]

    with pytest.raises(InvalidInputError) as raised:
        create_task(session, _spec(examples=examples))

    assert "did you mean 'hr/leave-policy.txt'? Or give the text as 'document_text'." in str(raised.value)
    misspelt = [ExampleSpec(query="How long is parental leave?", document="hr/leave-polcy.txt"), *_examples(1)]
    with pytest.raises(InvalidInputError, match=r"did you mean 'hr/leave-policy\.txt'"):
        create_task(session, _spec(examples=misspelt))


def test_the_template_names_real_documents_and_imports_once_filled_in(
    session: Session, corpus: Corpus, tmp_path: Path
) -> None:
    printed = runner.invoke(app, ["task", "template", "--corpus", "facts"])
    assert printed.exit_code == 0, printed.output
    data = yaml.safe_load(printed.stdout)
    assert data["corpus"] == "facts" and [e["document"] for e in data["examples"]] == ["d1", "d2"]

    written = tmp_path / "task.yaml"
    assert runner.invoke(app, ["task", "template", "-c", "facts", "-o", str(written)]).exit_code == 0
    assert written.read_text() == printed.stdout
    assert "already exists" in " ".join(
        runner.invoke(app, ["task", "template", "-c", "facts", "-o", str(written)]).stderr.split()
    )
    unfilled = runner.invoke(app, ["task", "import", str(written)])
    assert unfilled.exit_code == 1
    assert " ".join(unfilled.stderr.split()) == (
        "Error: Example 1 still has the template's query; replace it with a query a user would type for its document."
    )
    filled = printed.stdout.replace(PLACEHOLDER_QUERY, "What does the first fact say?", 1)
    written.write_text(filled.replace(PLACEHOLDER_QUERY, "And the second one?"))
    assert runner.invoke(app, ["task", "import", str(written)]).exit_code == 0
