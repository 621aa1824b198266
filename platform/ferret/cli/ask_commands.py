"""``ferret ask``: open-domain QA with provenance over a corpus; ``ferret reader train | list``: the span reader.

torch and transformers are imported inside the commands, so importing the CLI stays light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from ferret.cli.render import console, progress_bar
from ferret.core.db.corpus import get_corpus
from ferret.core.db.source import expand_principals
from ferret.core.errors import InvalidInputError
from ferret.core.qa.reader_store import list_readers, new_reader_dir, resolve_reader
from ferret.core.settings import get_settings
from ferret.runtime.context import app_context

if TYPE_CHECKING:
    from ferret.core.qa.answering import AskResult

reader_app = typer.Typer(help="The span reader that `ferret ask` answers with.", no_args_is_help=True)


def ask(
    question: Annotated[str, typer.Argument(help="The question to answer.")],
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus to answer from (its served index).")],
    k: Annotated[int, typer.Option("--k", "-k", help="Passages to retrieve and read.")] = 5,
    reader: Annotated[str | None, typer.Option(help="Reader name or folder (default: the newest trained).")] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="Ask as a member of this group (and public); repeatable."),
    ] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Read every document (administrator).")] = False,
    answers: Annotated[int, typer.Option(help="Alternative answers to show.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer and provenance as JSON.")] = False,
) -> None:
    """Answer a question from the corpus: the served retriever finds passages, the span reader reads them, and the
    answer comes with the passages that support it and their retrieval probabilities."""
    if not question.strip():
        raise InvalidInputError("The question is empty; type a question to answer.")
    if all_groups and group:
        raise InvalidInputError("--all-groups already sees every group; leave out --group, or --all-groups.")
    if not 1 <= k <= 50:
        raise InvalidInputError("k must be between 1 and 50 passages.")
    if answers < 1:
        raise InvalidInputError("--answers must be at least 1.")
    with app_context() as ctx:
        # what the user can fix in a second is said before the reader loads (torch, seconds) or is found missing
        get_corpus(ctx.session, corpus)
        reader_path = resolve_reader(ctx.settings, reader)
        from ferret.core.qa.answering import ask as answer_question
        from ferret.core.qa.span_reader import SpanReader

        span_reader = SpanReader.load(reader_path)
        groups = None if all_groups else (expand_principals(ctx.session, group) if group else [])
        result = answer_question(ctx.searcher, span_reader, corpus, question, k=k, acl_groups=groups, answers=answers)
    if as_json:
        console.print_json(json.dumps(result.as_dict()))
        return
    print_answer(result)


def print_answer(result: AskResult) -> None:
    """The answer, the passages that support it and the passages read, as plain text: a title, an id or a passage
    is the document's own words, never rich markup ("[draft] Leave policy" kept its brackets only by luck)."""
    best = result.best
    console.print(Text.assemble((best.text, "bold"), f"  (p = {best.probability:.3f})"))
    table = Table(title="supported by")
    for column in ("document", "title", "p(z|x)", "share", "where"):
        table.add_column(column)
    for source in best.provenance:
        table.add_row(
            Text(source.document),
            Text(source.title),
            f"{source.retrieval_probability:.3f}",
            f"{source.answer_probability / best.probability:.0%}" if best.probability else "-",
            Text(source.context),
        )
    console.print(table)
    if len(result.answers) > 1:
        others = "; ".join(f"{a.text} ({a.probability:.3f})" for a in result.answers[1:])
        console.print(Text(f"other answers: {others}"))
    read = ", ".join(f"{p.document} {p.retrieval_probability:.2f}" for p in result.passages)
    console.print(Text(f"passages read: {read}", style="dim"))


@reader_app.command("train")
def train(
    dataset: Annotated[
        Path, typer.Option(help="A SQuAD v1.1 JSON file, or a BEIR folder whose queries carry answers.")
    ],
    name: Annotated[str, typer.Option(help="Name of the new reader.")] = "squad",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 300,
    batch_size: Annotated[int, typer.Option(help="Question/passage pairs per step.")] = 16,
    learning_rate: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-4,
    max_questions: Annotated[int | None, typer.Option(help="Train on at most this many questions.")] = None,
) -> None:
    """Fine-tune a span reader (a start/end head on the base encoder) on SQuAD-format question/answer pairs."""
    # checked before the dataset and the model load: a zero batch or a negative rate ended in a traceback
    for option, value in (("--steps", steps), ("--batch-size", batch_size), ("--max-questions", max_questions)):
        if value is not None and value < 1:
            raise InvalidInputError(f"{option} must be at least 1.")
    if not learning_rate > 0:
        raise InvalidInputError("--learning-rate must be above 0 (1e-4 by default).")
    from ferret.core.encoder.registry import base_model_path
    from ferret.core.qa.span_reader import SpanReader, train_span_reader
    from ferret.core.qa.squad import load_qa_dataset, reading_examples

    settings = get_settings()
    folder = new_reader_dir(settings, name)
    questions, passages = load_qa_dataset(dataset)
    examples = reading_examples(questions[:max_questions], passages)
    span_reader = SpanReader.build(base_model_path(), device=settings.device or "cpu")
    with progress_bar() as bar:
        task = bar.add_task("training the span reader", total=steps)
        report = train_span_reader(
            span_reader,
            examples,
            steps=steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            on_step=lambda step, loss: bar.update(task, completed=step, description=f"loss {loss:.2f}"),
        )
    info = {"dataset": str(dataset), "steps": steps, "batch_size": batch_size, "learning_rate": learning_rate}
    span_reader.save(folder, info={**info, "report": report.__dict__})
    console.print(
        f"reader {name}: {report.examples} pairs, {report.steps} steps in {report.seconds:.0f} s, "
        f"loss {report.first_loss:.2f} → {report.last_loss:.2f}; saved in {folder}"
    )


@reader_app.command("list")
def list_all() -> None:
    """Trained span readers, newest first (`ferret ask` uses the first)."""
    settings = get_settings()
    for folder in list_readers(settings):
        info = json.loads((folder / "reader.json").read_text())
        console.print(f"{folder.name}: {info.get('steps')} steps on {info.get('dataset')}")
