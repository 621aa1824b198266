"""``ferret index``: build, list, promote, roll back and collect index versions of a corpus."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from ferret.cli.job_runs import ASYNC_HELP, run_command_job
from ferret.cli.render import activation_fields, console
from ferret.core.db.activation import INDEX, activation_history, history_line
from ferret.core.db.audit import cli_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import get_index_version, list_index_versions
from ferret.core.db.models import IndexVersion
from ferret.core.errors import InvalidInputError, NotFoundError
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.configuration import index_activation_note
from ferret.runtime.context import app_context

index_app = typer.Typer(help="Versioned index collections behind one alias.", no_args_is_help=True)

CorpusOption = Annotated[str, typer.Option("--corpus", "-c", help="Corpus name.")]


@index_app.command("build")
def build(
    corpus: CorpusOption,
    model: Annotated[str, typer.Option("--model", "-m", help="Model version to embed with.")] = "base",
    promote: Annotated[bool, typer.Option(help="Make the new version active once it is complete.")] = False,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Embed every passage into a new collection version; the active one is untouched until promotion (a job)."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        job = run_command_job(
            ctx, "index_build", detach=detach, corpus=corpus_row, model=model, promote=promote, actor=cli_actor()
        )
        if job is None:
            return
        index_version = ctx.session.get(IndexVersion, (job.result or {})["index_version_id"])
        if index_version is None:
            raise NotFoundError(f"Job {job.id} built an index version that no longer exists.")
        console.print(f"built {index_version.collection}: {index_version.point_count} points (job {job.id})")
        if promote:
            console.print(f"promoted version {index_version.version}; alias {corpus} -> {index_version.collection}")


def print_note(note: str | None) -> None:
    if note:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


@index_app.command("list")
def list_versions(
    corpus: CorpusOption,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of the table.")] = False,
) -> None:
    """Index versions of a corpus with their model, state, counts and last activation, then the activation history
    that `ferret index rollback` walks back through. A retired version's collection is gone: it has no points."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        history = activation_history(ctx.session, corpus_row, INDEX)
        last = {activation.version: activation for activation in history}
        rows: list[dict[str, Any]] = []
        for v in list_index_versions(ctx.session, corpus_row):
            activation = last.get(v.version)
            rows.append(
                {
                    "version": v.version,
                    "collection": v.collection,
                    "model": v.model_version.name,
                    "expansion": v.expansion,
                    "state": v.state.value,
                    "passages": v.passage_count,
                    "points": None if v.state.value == "retired" else v.point_count,
                    "created_at": v.created_at.isoformat(),
                    **activation_fields(activation, v.activated_at),
                }
            )
        if as_json:
            console.print_json(data={"corpus": corpus, "versions": rows, "activations": history_line(history)})
            return
        table = Table(title=f"index versions of {corpus}")
        for column in ("version", "collection", "model", "state", "passages", "points", "created", "activated", "by"):
            table.add_column(column)
        for row in rows:
            state = f"[bold green]{row['state']}[/]" if row["state"] == "active" else row["state"]
            expanded = f" + expansion ({row['expansion'].get('queries', 0)} queries)" if row["expansion"] else ""
            table.add_row(
                str(row["version"]),
                row["collection"],
                row["model"] + expanded,
                state,
                str(row["passages"]),
                "-" if row["points"] is None else str(row["points"]),
                row["created_at"][:16].replace("T", " "),
                row["activated_at"],
                f"{row['activated_by']} ({row['via']})" if row["activated_by"] is not None else "",
            )
        console.print(table)
        if history:
            console.print(f"activations, oldest first: {history_line(history)}", highlight=False)


@index_app.command("promote")
def promote(
    corpus: CorpusOption,
    version: Annotated[int | None, typer.Argument(help="Index version (see `ferret index list`).")] = None,
    version_option: Annotated[int | None, typer.Option("--version", "-v", hidden=True)] = None,
) -> None:
    """Make a ready version active: one atomic alias swap."""
    # VERSION is an argument, as in `ferret config promote`; --version still works for scripts written before.
    version = version if version is not None else version_option
    if version is None:
        raise InvalidInputError("Name the version to promote: `ferret index promote --corpus C VERSION`.")
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        index_version = VersionedCollection(ctx.session, ctx.settings, ctx.backend, corpus_row).promote(
            get_index_version(ctx.session, corpus_row, version), actor=cli_actor()
        )
        console.print(f"alias {corpus} -> {index_version.collection}")
        print_note(index_activation_note(ctx.session, corpus_row, index_version))


@index_app.command("rollback")
def rollback(corpus: CorpusOption) -> None:
    """Re-activate the version active before the current one; run again, it goes one further back (v3 -> v2 -> v1)."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        index_version = VersionedCollection(ctx.session, ctx.settings, ctx.backend, corpus_row).rollback(
            actor=cli_actor()
        )
        console.print(f"rolled back: alias {corpus} -> {index_version.collection}")
        print_note(index_activation_note(ctx.session, corpus_row, index_version))


@index_app.command("gc")
def collect(
    corpus: CorpusOption,
    keep: Annotated[int | None, typer.Option(help="Ready versions to keep for rollback.")] = None,
) -> None:
    """Delete the collections of old ready versions beyond --keep, and of failed builds."""
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        retired = VersionedCollection(ctx.session, ctx.settings, ctx.backend, corpus_row).collect(keep)
        console.print(f"retired {len(retired)} version(s): {', '.join(v.collection for v in retired) or 'none'}")


@index_app.command("repair")
def repair(
    corpus: CorpusOption,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Quarantine documents the index cannot hold, fail versions that no longer load, and rebuild from the database
    (a job)."""
    with app_context() as ctx:
        get_corpus(ctx.session, corpus)
        job = run_command_job(ctx, "index_repair", detach=detach, corpus=corpus, actor=cli_actor())
        if job is None:
            return
        report = job.result or {}
        for external_id, reason in report.get("quarantined", []):
            console.print(f"quarantined {external_id}: {reason}")
        if report.get("unreadable"):
            console.print(f"failed version(s) that cannot be loaded: {', '.join(map(str, report['unreadable']))}")
        if report.get("rebuilt") is not None:
            action = "built and promoted" if report.get("promoted") else "built"
            console.print(f"{action} version {report['rebuilt']} ({report.get('rebuilt_points')} points)")
        if expanded := report.get("expanded"):
            console.print(
                f"not rebuilt: version(s) {', '.join(map(str, expanded))} held a document expansion; run the task's "
                "pipeline again with --expand to make a new one (its configuration serves the plain index meanwhile)"
            )
        if not (report.get("quarantined") or report.get("unreadable")):
            console.print(f"corpus {corpus}: every live version loads and every document is within the limits")
        console.print(f"(job {job.id})", highlight=False)
