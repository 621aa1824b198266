"""``ferret config``: the search configurations of a corpus (retriever + fusion + reranker), promoted as one unit."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from ferret.cli.render import activation_fields, console
from ferret.core.db.activation import CONFIG, activation_history, history_line
from ferret.core.db.audit import cli_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.search_config import get_search_config, list_search_configs
from ferret.core.errors import InvalidInputError
from ferret.core.search.configuration import (
    DEFAULT_RERANK_DEPTH,
    DEFAULT_RERANK_WEIGHT,
    create_config,
    describe,
    promote_config,
    retriever_label,
    rollback_config,
)
from ferret.core.search.fusion import DEFAULT_FUSION, FUSION_METHODS, NORMALISATIONS, Fusion
from ferret.runtime.context import app_context

config_app = typer.Typer(
    help="Search configurations: retriever, fusion and reranker as one unit.", no_args_is_help=True
)

CorpusOption = Annotated[str, typer.Option("--corpus", "-c", help="Corpus name.")]


@config_app.command("list")
def list_configs(
    corpus: CorpusOption,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of the table.")] = False,
) -> None:
    """Every configuration of a corpus with its parts, the guard's decision and its last activation, then the
    activation history that `ferret config rollback` walks back through."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        history = activation_history(ctx.session, corpus_row, CONFIG)
        last = {activation.version: activation for activation in history}
        configs = list_search_configs(ctx.session, corpus_row)
        rows: list[dict[str, Any]] = []
        for config in configs:
            activation = last.get(config.version)
            rows.append(
                {
                    **describe(config),
                    **activation_fields(activation, config.activated_at),
                }
            )
    if as_json:
        console.print_json(data={"corpus": corpus, "configurations": rows, "activations": history_line(history)})
        return
    table = Table(title=f"search configurations of {corpus}")
    for column in ("version", "retriever", "fusion", "reranker", "guard", "state", "activated", "by"):
        table.add_column(column)
    for row in rows:
        guard = row["guard"] if isinstance(row["guard"], dict) else {}
        reranker = f"{row['reranker']} @{row['rerank_depth']} w={row['rerank_weight']:.2f}" if row["reranker"] else "-"
        table.add_row(
            str(row["version"]), retriever_label(row), str(row["fusion"]), reranker,
            ("passed" if guard.get("passed") else "refused") if guard else "-",
            "[bold green]active[/]" if row["active"] else "ready",
            str(row["activated_at"]),
            f"{row['activated_by']} ({row['via']})" if row["activated_by"] is not None else "",
        )  # fmt: skip
    console.print(table)
    if history:
        console.print(f"activations, oldest first: {history_line(history)}", highlight=False)
    if not any(row["active"] for row in rows):
        console.print(
            f"none is active: searches use the active index with the default fusion ({DEFAULT_FUSION.describe()}) "
            f"and no reranker; `ferret config promote --corpus {corpus} N` makes one active",
            highlight=False,
        )


@config_app.command("show")
def show(corpus: CorpusOption, version: Annotated[int, typer.Argument(help="Configuration version.")]) -> None:
    """One configuration with the evidence its weights and the guard's decision came from."""
    with app_context() as ctx:
        config = get_search_config(ctx.session, get_corpus(ctx.session, corpus), version)
        console.print_json(data={**describe(config), "evidence": config.evidence})


@config_app.command("create")
def create(
    corpus: CorpusOption,
    retriever: Annotated[str, typer.Option(help="The dual encoder whose index the first stage searches.")] = "base",
    fusion: Annotated[
        str, typer.Option(help=f"How hybrid search fuses dense and BM25: {' or '.join(FUSION_METHODS)}.")
    ] = DEFAULT_FUSION.method,
    alpha: Annotated[
        float | None,
        typer.Option(
            help=f"The dense share of a convex fusion (1: dense only, 0: BM25 only); default {DEFAULT_FUSION.weight}."
        ),
    ] = None,
    normalisation: Annotated[
        str | None,
        typer.Option(
            help=f"Score normalisation of a convex fusion: {' or '.join(NORMALISATIONS)}; default "
            f"{DEFAULT_FUSION.normalisation}."
        ),
    ] = None,
    reranker: Annotated[str | None, typer.Option(help="A trained cross-encoder to rerank the top documents.")] = None,
    depth: Annotated[int, typer.Option(help="Documents the reranker reads per query.")] = DEFAULT_RERANK_DEPTH,
    rerank_weight: Annotated[
        float, typer.Option(help="The reranker's share of the fused score (1: its order alone).")
    ] = DEFAULT_RERANK_WEIGHT,
    note: Annotated[str, typer.Option(help="Why it was made, shown by `ferret config show`.")] = "",
    index_version: Annotated[
        int | None,
        typer.Option(
            "--index-version",
            help="The index version it searches, built by the retriever (an expanded one: `ferret index list`); "
            "default: the retriever's plain index.",
        ),
    ] = None,
) -> None:
    """Make a configuration by hand (a fusion weight, RRF, a reranker at another depth); it is not active until
    `ferret config promote`, and `ferret search --config N` compares it first."""
    if fusion == "rrf" and (alpha is not None or normalisation is not None):
        given = "--alpha" if alpha is not None else "--normalisation"
        raise InvalidInputError(
            f"{given} belongs to a convex fusion; RRF fuses ranks (leave it out, or --fusion convex)."
        )
    chosen = Fusion(
        fusion,  # type: ignore[arg-type]
        DEFAULT_FUSION.weight if alpha is None else alpha,
        DEFAULT_FUSION.normalisation if normalisation is None else normalisation,  # type: ignore[arg-type]
    )
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        config = create_config(
            ctx.session, corpus_row, retriever=retriever, fusion=chosen,
            reranker=reranker, rerank_depth=depth, rerank_weight=rerank_weight, note=note, actor=cli_actor(),
            index_version=index_version,
        )  # fmt: skip
        shown = describe(config)
        console.print(
            f"configuration {config.version} of {corpus}: retriever {retriever_label(shown)}, {shown['fusion']}"
            + (f", reranker {shown['reranker']} @{config.rerank_depth}" if shown["reranker"] else "")
            + f"; not active: `ferret config promote --corpus {corpus} {config.version}`"
        )


@config_app.command("promote")
def promote(corpus: CorpusOption, version: Annotated[int, typer.Argument(help="Configuration version.")]) -> None:
    """Make a configuration what search runs (its retriever's index becomes the alias target)."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        config = get_search_config(ctx.session, corpus_row, version)
        config = promote_config(ctx.session, ctx.settings, ctx.backend, corpus_row, config, actor=cli_actor())
        console.print(f"configuration {config.version} of {corpus} is active")


@config_app.command("rollback")
def rollback(corpus: CorpusOption) -> None:
    """Re-activate the configuration that was active before the current one."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        config = rollback_config(ctx.session, ctx.settings, ctx.backend, corpus_row, actor=cli_actor())
        console.print(f"rolled back: configuration {config.version} of {corpus} is active")
