"""``ferret pipeline run``: the whole Promptagator pipeline for a task, with progress."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

import typer
from rich.table import Table

from ferret.cli.job_runs import ASYNC_HELP, run_command_job
from ferret.cli.render import console
from ferret.core.db.task import get_task
from ferret.core.errors import InvalidInputError
from ferret.core.pipeline.promptagator.in_process import PipelineConfig, PipelineResult, pipeline_result
from ferret.core.pipeline.promptagator.state import PipelineState
from ferret.runtime.context import app_context

pipeline_app = typer.Typer(help="Train a retriever for a task from its examples.", no_args_is_help=True)

_DEFAULTS = PipelineConfig()


@pipeline_app.command("run")
def run(
    task: Annotated[str, typer.Option("--task", "-t", help="Task name (see `ferret task list`).")],
    max_documents: Annotated[int | None, typer.Option(help="Generate for at most this many documents.")] = None,
    queries_per_doc: Annotated[int | None, typer.Option(help="Queries sampled per document (1-8).")] = None,
    round_trip: Annotated[
        str,
        typer.Option(
            help="Round-trip filter retriever: none, bm25, base, hybrid (the search that runs now) or a model."
        ),
    ] = _DEFAULTS.round_trip,
    logprob_quantile: Annotated[
        float | None,
        typer.Option(help="Drop queries whose generator log-probability is below this quantile of the run (0-1)."),
    ] = None,
    learning_rate: Annotated[float, typer.Option(help="Fine-tuning learning rate.")] = _DEFAULTS.learning_rate,
    max_steps: Annotated[int | None, typer.Option(help="Training steps (default scaled to the data).")] = None,
    round_trip_k: Annotated[
        int | None,
        typer.Option(
            help="Keep a query when its document is in its top K (default: the depth at which three in four of the "
            "task's examples find their document, 10 to 100)."
        ),
    ] = _DEFAULTS.round_trip_k,
    base_weight: Annotated[
        float, typer.Option(help="Average the tuned weights with the base (0-1).")
    ] = _DEFAULTS.base_weight,
    hard_negatives: Annotated[
        str,
        typer.Option(help="none; bm25: one BM25 hard negative per pair; residual: bm25 plus CLEAR's lexical margin."),
    ] = _DEFAULTS.hard_negatives,
    promote: Annotated[
        bool,
        typer.Option(
            "--promote/--no-promote",
            help="Make the new model's index version active when the guard passes, as `index build --promote` "
            "does once it is built; --no-promote builds it only.",
        ),
    ] = _DEFAULTS.promote != "never",
    force_promote: Annotated[
        bool, typer.Option("--force-promote", help="Promote it even when the guard refuses.")
    ] = False,
    model_name: Annotated[str | None, typer.Option(help="Name of the new model version.")] = None,
    init: Annotated[
        str | None, typer.Option(help="realm:<model>: start from a REALM-pre-trained model instead of the base.")
    ] = None,
    reranker: Annotated[
        bool,
        typer.Option(
            "--reranker",
            help="Also train a cross-encoder reranker on the kept pairs (at least 200); kept only if it beats the "
            "first stage. Minutes on a GPU, 10-20 minutes or more on 2 CPU cores.",
        ),
    ] = _DEFAULTS.reranker,
    distill: Annotated[
        bool,
        typer.Option(
            "--distill",
            help="With --reranker: when the reranker is kept, distil it into the retriever (GPL) and keep the "
            "student if the guard prefers it.",
        ),
    ] = _DEFAULTS.distill,
    expand: Annotated[
        bool,
        typer.Option(
            "--expand",
            help="Append each training document's kept queries to its BM25 vectors in a new index version "
            "(doc2query--); kept only if the guard prefers it. Costs a second index build.",
        ),
    ] = _DEFAULTS.expand,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Generate synthetic queries, filter them, fine-tune, check with the guard, index and promote (a job)."""
    if force_promote and not promote:
        raise InvalidInputError("Give at most one of --no-promote and --force-promote.")
    config = PipelineConfig(
        queries_per_doc=queries_per_doc,
        max_documents=max_documents,
        round_trip=round_trip,
        logprob_quantile=logprob_quantile,
        round_trip_k=round_trip_k,
        hard_negatives=cast(Literal["none", "bm25", "residual"], hard_negatives),
        learning_rate=learning_rate,
        max_steps=max_steps,
        base_weight=base_weight,
        promote="force" if force_promote else "auto" if promote else "never",
        model_name=model_name,
        init=init,
        reranker=reranker,
        distill=distill,
        expand=expand,
    ).validated()  # one clear sentence for a bad value, before any work
    with app_context() as ctx:
        job = run_command_job(ctx, "pipeline", detach=detach, task=get_task(ctx.session, task), config=config)
        if job is None:
            return
        state = {key: value for key, value in (job.result or {}).items() if key != "stages_done"}
        print_result(pipeline_result(ctx.session, PipelineState.from_json(state)))


def print_result(result: PipelineResult) -> None:
    counters = result.run.counters
    console.print(
        f"generation run {result.run.id}: {counters.get('documents', 0)} documents, "
        f"{result.filters.kept} queries kept of {result.filters.considered}; dropped {dict(result.filters.dropped)}"
    )
    if (summary := result.filters.round_trip_summary()) is not None:
        console.print(summary)
    guard = result.guard
    table = Table(title=f"guard: {result.model.name} vs the active model")
    for column in ("", "examples MRR@10", "held-out MRR@10", "held-out R@10"):
        table.add_column(column)
    for label, scores in (("candidate", guard.candidate), ("active", guard.reference)):
        table.add_row(
            label, f"{scores.examples_mrr:.3f}", f"{scores.held_out_mrr:.3f}", f"{scores.held_out_recall_at_10:.3f}"
        )
    console.print(table)
    verdict = "[green]passed[/]" if guard.passed else "[yellow]refused[/]"
    console.print(f"guard {verdict}: {guard.reason}")
    if result.promoted and result.index_version is not None:
        console.print(f"promoted {result.index_version.collection} (model {result.model.name})")
    elif result.index_version is not None:
        console.print(f"built {result.index_version.collection}, not promoted")
    else:
        console.print(
            f"not promoted; to use it anyway: ferret index build --corpus {result.run.task.corpus.name} "
            f"--model {result.model.name} --promote"
        )
    print_search_config(result.search_config)
    console.print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in result.seconds.items()))


def print_search_config(outcome: dict[str, Any] | None) -> None:
    """The configuration stage's outcome: what was tuned, and the configuration guard's decision."""
    if not outcome:
        return
    if "skipped" in outcome:
        console.print(f"search configuration: not tuned ({outcome['skipped']})")
        return
    fusion = outcome.get("fusion", {})
    console.print(
        f"search configuration {outcome.get('version')}: retriever {outcome.get('retriever')}; {fusion.get('reason')}"
    )
    if compared := outcome.get("retrievers"):
        scores = ", ".join(f"{name} {c['objective']:.3f}" for name, c in compared.items() if c["objective"] is not None)
        console.print(f"  retrievers compared on the tuning evidence (objective, examples out of sample): {scores}")
    if expanded := outcome.get("expansion"):
        if (own := expanded.get("guard")) is not None:
            kept = "kept" if expanded.get("kept") else "dropped"
            what = f"{expanded.get('queries')} queries of {expanded.get('documents')} documents"
            console.print(f"  expansion ({what}, index v{expanded.get('index_version')}): {kept}: {own.get('reason')}")
        else:
            console.print(f"  expansion: {expanded.get('refused')}")
    if reranker := outcome.get("reranker"):
        console.print(f"  reranker: {reranker.get('refused') or reranker.get('reason')}")
        if (own := reranker.get("guard")) is not None:
            console.print(f"    {'kept' if reranker.get('kept') else 'dropped'}: {own.get('reason')}")
    if distilled := outcome.get("distillation"):
        if (own := distilled.get("guard")) is not None:
            kept = "kept" if distilled.get("kept") else "dropped"
            console.print(f"  distillation into {distilled.get('student')}: {kept}: {own.get('reason')}")
        else:
            console.print(f"  distillation: {distilled.get('refused') or distilled.get('skipped')}")
    guard = outcome.get("guard", {})
    verdict = "[green]passed[/]" if guard.get("passed") else "[yellow]refused[/]"
    state = "promoted" if outcome.get("promoted") else "not promoted"
    console.print(f"  configuration guard {verdict} against {guard.get('reference')}: {guard.get('reason')}; {state}")
