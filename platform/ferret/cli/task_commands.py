"""``ferret task``: Promptagator retrieval tasks — create, import and export them as YAML, inspect their runs,
filter their synthetic queries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ferret.cli.render import console
from ferret.core.db.corpus import get_corpus
from ferret.core.db.synthetic import get_run, latest_run, list_runs
from ferret.core.db.task import delete_task, first_external_ids, get_task, list_tasks, task_run_counts
from ferret.core.encoder.registry import base_model_path, load_encoder
from ferret.core.errors import InvalidInputError
from ferret.core.synth.filters import ROUND_TRIP_MAX_K, FilterConfig, Retriever, apply_filters
from ferret.core.synth.task_spec import (
    ExampleSpec,
    GenerationSettings,
    TaskSpec,
    create_task,
    dump_task_spec,
    load_task_spec,
    task_template,
    task_to_spec,
)
from ferret.runtime.context import app_context

task_app = typer.Typer(
    help="Retrieval tasks: a description and 2-8 examples for query generation.", no_args_is_help=True
)

NameArgument = Annotated[str, typer.Argument(help="Task name.")]


def parse_example(value: str) -> ExampleSpec:
    """``"query=>external id"``; the last ``=>`` separates them, so a query may contain one."""
    if "=>" not in value:
        raise InvalidInputError(f"--example {value!r} must look like 'query=>document external id'.")
    query, document = (part.strip() for part in value.rsplit("=>", 1))
    return ExampleSpec(query=query, document=document)


@task_app.command("create")
def create(
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus whose documents get queries.")],
    name: Annotated[str, typer.Option("--name", "-n", help="Task name.")],
    description: Annotated[str, typer.Option(help="What the task is about, in a sentence.")] = "",
    e_doc: Annotated[str, typer.Option("--e-doc", help="What the prompt calls a document.")] = "Document",
    e_query: Annotated[str, typer.Option("--e-query", help="What the prompt calls a query.")] = "Query",
    example: Annotated[
        list[str] | None, typer.Option("--example", "-e", help="'query=>document external id', 2 to 8 times.")
    ] = None,
    zero_shot: Annotated[bool, typer.Option("--zero-shot", help="No examples: the zero-shot prompt.")] = False,
    queries_per_doc: Annotated[int, typer.Option(help="Queries sampled per document (1-8).")] = 8,
    max_documents: Annotated[int | None, typer.Option(help="Cap on documents (a seeded sample).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the document sample and of sampling.")] = 0,
) -> None:
    """Create a task from options; `ferret task import` takes the same as a YAML file."""
    spec = TaskSpec(
        name=name,
        corpus=corpus,
        description=description,
        e_doc=e_doc,
        e_query=e_query,
        zero_shot=zero_shot,
        generation=_generation(queries_per_doc, max_documents, seed),
        examples=[parse_example(value) for value in example or []],
    )
    with app_context() as ctx:
        task = create_task(ctx.session, spec)
        console.print(f"created task {task.name} on corpus {corpus} with {len(task.examples)} examples")


@task_app.command("template")
def template(
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus of the task; its first ids fill the examples.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the file here (not over one).")] = None,
) -> None:
    """Print a commented task file to fill in, then `ferret task import` it."""
    with app_context() as ctx:
        text = task_template(corpus, first_external_ids(ctx.session, get_corpus(ctx.session, corpus), 2))
    if output is None:
        typer.echo(text, nl=False)
        return
    if output.exists():
        raise InvalidInputError(f"{output} already exists; choose another --output or remove it.")
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote {output}; fill it in, then run `ferret task import {output}`")


def _generation(queries_per_doc: int, max_documents: int | None, seed: int) -> GenerationSettings:
    from pydantic import ValidationError

    try:
        return GenerationSettings(queries_per_doc=queries_per_doc, max_documents=max_documents, seed=seed)
    except ValidationError as error:
        first = error.errors()[0]
        raise InvalidInputError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}.") from None


@task_app.command("import")
def import_task(file: Annotated[Path, typer.Argument(help="A task YAML file.")]) -> None:
    """Create a task from a YAML file (name, corpus, description, e_doc, e_query, examples, generation)."""
    spec = load_task_spec(file)
    with app_context() as ctx:
        task = create_task(ctx.session, spec)
        console.print(f"imported task {task.name} on corpus {spec.corpus} with {len(task.examples)} examples")


@task_app.command("export")
def export(
    name: NameArgument,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Write a task as YAML, ready for `ferret task import`."""
    with app_context() as ctx:
        text = dump_task_spec(task_to_spec(get_task(ctx.session, name)))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {output}")


@task_app.command("list")
def list_command() -> None:
    """Tasks with their corpus, examples and generation runs."""
    with app_context() as ctx:
        tasks = list_tasks(ctx.session)
        runs = task_run_counts(ctx.session, tasks)
        table = Table(title="tasks")
        for column in ("name", "corpus", "examples", "runs", "description"):
            table.add_column(column)
        for task in tasks:
            examples = "zero-shot" if task.zero_shot else str(len(task.examples))
            table.add_row(task.name, task.corpus.name, examples, str(runs.get(task.id, 0)), task.description)
        console.print(table)


@task_app.command("show")
def show(name: NameArgument) -> None:
    """A task's settings, examples and generation runs."""
    with app_context() as ctx:
        task = get_task(ctx.session, name)
        console.print(dump_task_spec(task_to_spec(task)), highlight=False, markup=False)
        table = Table(title=f"generation runs of {name}")
        for column in ("run", "state", "documents", "queries", "failures", "seconds", "started"):
            table.add_column(column)
        for run in list_runs(ctx.session, task):
            counters = run.counters or {}
            failures = ", ".join(f"{reason} {count}" for reason, count in (counters.get("failures") or {}).items())
            table.add_row(
                str(run.id),
                run.state.value,
                str(counters.get("documents", 0)),
                str(counters.get("queries", 0)),
                failures or "-",
                f"{counters.get('wall_seconds', 0.0):.0f}",
                f"{run.started_at:%Y-%m-%d %H:%M}",
            )
        console.print(table)


@task_app.command("delete")
def delete(name: NameArgument) -> None:
    """Delete a task with its examples, runs and synthetic queries."""
    with app_context() as ctx:
        delete_task(ctx.session, get_task(ctx.session, name))
        console.print(f"deleted task {name}")


@task_app.command("filter")
def filter_command(
    name: NameArgument,
    run_id: Annotated[int | None, typer.Option("--run", help="Run id (default: the task's latest).")] = None,
    retriever: Annotated[str, typer.Option(help="Round-trip retriever: bm25, dense (base model) or none.")] = "bm25",
    k: Annotated[
        int | None,
        typer.Option("--k", "-k", help="Keep a query when its document is in its top K (default: from the examples)."),
    ] = None,
    best_of_n: Annotated[bool, typer.Option(help="Per document keep only the best query by round-trip rank.")] = False,
    min_words: Annotated[int, typer.Option(help="Shorter queries are dropped.")] = 3,
    max_words: Annotated[int, typer.Option(help="Longer queries are dropped.")] = 40,
) -> None:
    """Drop short, long, copied and duplicate queries and those that fail the round trip; reasons are kept."""
    from ferret.core.synth.retrievers import BM25Retriever, EncoderRetriever  # torch: only the filter needs it

    if retriever not in ("bm25", "dense", "none"):
        raise InvalidInputError(f"--retriever {retriever!r} is not one of bm25, dense, none.")
    with app_context() as ctx:
        task = get_task(ctx.session, name)
        run = get_run(ctx.session, run_id) if run_id is not None else latest_run(ctx.session, task)
        if run is None or run.task_id != task.id:
            raise InvalidInputError(f"Task {name!r} has no such generation run; see `ferret task show {name}`.")
        round_trip: Retriever | None = None
        if retriever == "bm25":
            round_trip = BM25Retriever.for_corpus(ctx.session, task.corpus, depth=max(k or 0, ROUND_TRIP_MAX_K))
        elif retriever == "dense":
            encoder = load_encoder(base_model_path(ctx.settings), ctx.settings)
            round_trip = EncoderRetriever.for_corpus(
                ctx.session, task.corpus, encoder, depth=max(k or 0, ROUND_TRIP_MAX_K)
            )
        config = FilterConfig(
            min_words=min_words, max_words=max_words, round_trip=round_trip, round_trip_k=k, best_of_n=best_of_n
        )
        report = apply_filters(ctx.session, run, config)
        dropped = ", ".join(f"{reason} {count}" for reason, count in sorted(report.dropped.items())) or "none"
        console.print(
            f"run {run.id}: kept {report.kept} of {report.considered} usable queries; dropped: {dropped}; "
            f"failed generations: {report.failed}"
        )
        if (summary := report.round_trip_summary()) is not None:
            console.print(summary)
