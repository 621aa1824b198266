"""``ferret source add|list|sync|runs|remove|scheduler``: configured sources, synced on demand or on a schedule.

A definition file (YAML or JSON, see ``ferret.core.sources.config``) names the corpus, the connector kind, its
config (secrets as ``{env: NAME}`` or ``{file: PATH}`` references, never plain text) and ``schedule_minutes``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ferret.cli.job_runs import ASYNC_HELP, run_command_job
from ferret.cli.render import console
from ferret.core.db.corpus import get_corpus, list_corpora
from ferret.core.db.index_version import active_index_version
from ferret.core.db.models import SyncRun
from ferret.core.db.source import last_sync_run, list_sources, run_summary, source_document_counts, sync_runs
from ferret.core.errors import InvalidInputError, NotFoundError
from ferret.core.sources.config import load_spec
from ferret.core.sources.schedule import sync_due
from ferret.core.sources.service import add_source, find_configured, group_option, remove_source
from ferret.runtime.context import app_context

source_app = typer.Typer(
    help="Configured sources (S3, SMB, web, SQL, Git, Confluence, SharePoint...).", no_args_is_help=True
)


def print_run(run: SyncRun | dict[str, Any], *, as_json: bool = False) -> None:
    """A sync report: counts, skipped items with their reasons, duration, error."""
    summary = run if isinstance(run, dict) else run_summary(run)
    if as_json:
        console.print_json(json.dumps(summary))
        return
    counts = summary.get("counts", {})
    console.print(
        f"sync {summary.get('id')} {summary.get('state')}: new {counts.get('new', 0)}, changed "
        f"{counts.get('changed', 0)}, unchanged {counts.get('unchanged', 0)}, deleted {counts.get('deleted', 0)}, "
        f"permission updates {counts.get('permission_updates', 0)}, skipped {counts.get('skipped', 0)}; "
        f"{counts.get('passages_embedded', 0)} passages embedded, {counts.get('checkpoints', 0)} checkpoints, "
        f"{summary.get('duration_s') or counts.get('duration_s', 0)} s",
        highlight=False,
    )
    for item in summary.get("skipped", [])[:50]:
        console.print(f"  skipped {item['external_id']}: {item['reason']}", highlight=False)
    if summary.get("error"):
        console.print(f"  error: {summary['error']}", highlight=False)


@source_app.command("add")
def add(
    definition: Annotated[
        Path, typer.Argument(help="YAML or JSON file: corpus, name, kind, config, schedule_minutes.")
    ],
    replace: Annotated[bool, typer.Option(help="Replace the definition of an existing source.")] = False,
    check: Annotated[
        bool,
        typer.Option(
            help="Before storing, check that Ferret can reach and read the source (one or two requests: the bucket, "
            "share, table and columns, repository and branch, or start page); --no-check stores it unchecked, e.g. "
            "before the store is reachable from here."
        ),
    ] = True,
) -> None:
    """Add (or with --replace, change) a source: its connector is built once and, unless --no-check, it reads the
    source once, so a wrong bucket, password, share, table, repository or site is refused now with nothing stored."""
    spec = load_spec(definition)
    with app_context() as ctx:
        source = add_source(ctx.session, spec, ctx.connectors, replace=replace, check=check)
        ctx.session.commit()
        schedule = f"every {source.schedule_minutes} min" if source.schedule_minutes else "on demand"
        checked = "access checked" if check else "access not checked (--no-check)"
        console.print(f"source {source.name} ({source.kind}) of corpus {spec.corpus}: {checked}, synced {schedule}")
        console.print(  # a store's groups carry the source's name: `--group hr` would match none of them
            f"its groups are searched as `ferret search --corpus {spec.corpus} --group "
            f"{group_option(source, ctx.connectors)}`",
            highlight=False,
            markup=False,
        )


@source_app.command("list")
def list_command(
    corpus: Annotated[str | None, typer.Option("--corpus", "-c", help="Only sources of this corpus.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Sources with their corpus, document count, schedule and the report of their last sync."""
    with app_context() as ctx:
        sources = list_sources(ctx.session, get_corpus(ctx.session, corpus) if corpus else None)
        corpus_names = {row.id: row.name for row in list_corpora(ctx.session)}
        documents = source_document_counts(ctx.session)
        rows: list[dict[str, Any]] = [
            {
                "corpus_id": source.corpus_id,
                "corpus": corpus_names.get(source.corpus_id, ""),
                "name": source.name,
                "kind": source.kind,
                "enabled": source.enabled,
                "schedule_minutes": source.schedule_minutes,
                "documents": documents.get((source.corpus_id, source.name), 0),
                "last_sync": run_summary(last_sync_run(ctx.session, source)),
                "last_run_at": source.last_run_at.isoformat() if source.last_run_at else None,
            }
            for source in sources
        ]
        if as_json:
            console.print_json(json.dumps(rows))
            return
        several_corpora = len({row["corpus_id"] for row in rows}) > 1
        table = Table(title="sources")
        for column in ("corpus", "name", "kind", "docs", "schedule", "last sync", "new/chg/del/perm", "skipped"):
            if column != "corpus" or several_corpora:
                table.add_column(column, justify="right" if column in ("docs", "skipped") else "left")
        errors: list[str] = []
        for row in rows:
            last: dict[str, Any] = row["last_sync"]
            counts: dict[str, Any] = last.get("counts", {})
            if not last and row["last_run_at"]:  # loaded by `ferret ingest`, which keeps no sync report
                when, figures = f"ingested {_minute(row['last_run_at'])}", "-"
            else:
                when = f"{last.get('state', 'never')} {_minute(last.get('started_at', ''))}".strip()
                figures = "/".join(
                    str(counts.get(key, 0)) for key in ("new", "changed", "deleted", "permission_updates")
                )
            table.add_row(
                *([row["corpus"]] if several_corpora else []),
                row["name"],
                row["kind"],
                f"{row['documents']:,}",
                f"{row['schedule_minutes']} min" if row["schedule_minutes"] else "manual",
                when,
                figures,
                str(counts.get("skipped", 0)) if last else "-",
            )
            if last.get("error"):  # in full below the table: a column would cut it to its first words
                errors.append(f"{row['corpus'] + '/' if several_corpora else ''}{row['name']}: {last['error']}")
        console.print(table)
        for line in errors:
            console.print(line, highlight=False, markup=False)


def _minute(timestamp: str) -> str:
    """``2026-11-29T22:28:51.123`` (UTC) as ``2026-11-29 22:28``: a table cell without seconds and fractions."""
    return timestamp[:16].replace("T", " ")


@source_app.command("sync")
def sync(
    corpus: Annotated[str, typer.Argument(help="Corpus of the source.")],
    name: Annotated[str, typer.Argument(help="Source name.")],
    checkpoint_every: Annotated[int, typer.Option(help="Persist the cursor every this many documents.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Read every document from the start, not from the checkpoint (after an upgrade that changes how "
            "files are read); documents that read the same are not re-embedded.",
        ),
    ] = False,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Sync one source now (resuming from its last checkpoint, or from the start with --full) and print the report
    (a job)."""
    with app_context() as ctx:
        source = find_configured(ctx.session, corpus, name)
        job = run_command_job(
            ctx,
            "source_sync",
            detach=detach,
            source=source,
            trigger="manual",
            checkpoint_every=checkpoint_every,
            full=full,
        )
        if job is None:
            return
        run = ctx.session.get(SyncRun, (job.result or {})["sync_run"])
        if run is None:
            raise NotFoundError(f"Job {job.id} recorded a sync run that no longer exists.")
        print_run(run, as_json=as_json)
        if not as_json and active_index_version(ctx.session, get_corpus(ctx.session, corpus)) is None:
            console.print(f"next: `ferret index build --corpus {corpus} --promote` makes them searchable")


@source_app.command("runs")
def runs(
    corpus: Annotated[str, typer.Argument(help="Corpus of the source.")],
    name: Annotated[str, typer.Argument(help="Source name.")],
    limit: Annotated[int, typer.Option(help="Newest runs shown.")] = 10,
) -> None:
    """The reports of a source's newest syncs, each after when it started and what started it."""
    with app_context() as ctx:
        for run in sync_runs(ctx.session, find_configured(ctx.session, corpus, name), limit):
            started = run.started_at.strftime("%Y-%m-%d %H:%M:%S")
            console.print(f"{started} UTC, {run.trigger}: ", end="", highlight=False)
            print_run(run)


@source_app.command("remove")
def remove(
    corpus: Annotated[str, typer.Argument(help="Corpus of the source.")],
    name: Annotated[str, typer.Argument(help="Source name.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove a source and its documents from the database and every live index version."""
    with app_context() as ctx:
        source = find_configured(ctx.session, corpus, name)
        if not yes:  # as `corpus delete`: the documents leave the live index at once
            if not sys.stdin.isatty():
                raise InvalidInputError(
                    f"Removing source {name!r} of {corpus!r} cannot be undone; add --yes to confirm."
                )
            typer.confirm(f"Remove source {name!r} of corpus {corpus!r} and its documents from the index?", abort=True)
        removed = remove_source(ctx.session, ctx.backend, ctx.settings, source)
        console.print(f"source {name} removed with its {removed} documents")


@source_app.command("scheduler")
def scheduler(
    interval: Annotated[float, typer.Option(help="Seconds between two looks at the schedule.")] = 60.0,
    once: Annotated[bool, typer.Option(help="Sync the due sources once and exit.")] = False,
) -> None:
    """The embedded scheduler: syncs every due source, then waits (without a broker; Celery beat does it with one)."""
    while True:
        with app_context() as ctx:
            synced = sync_due(ctx.session, ctx.settings, ctx.backend, ctx.connectors)
            if once and not synced:
                console.print("no source is due: each syncs again once its schedule_minutes have passed")
            for source_name, result in synced:
                if isinstance(result, str):
                    console.print(f"{source_name}: {result}", highlight=False)
                else:
                    console.print(f"{source_name}: ", end="")
                    print_run(result)
        if once:
            return
        time.sleep(interval)
