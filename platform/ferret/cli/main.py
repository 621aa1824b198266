"""``ferret``: ingest, index, search and evaluate from the terminal.

User mistakes print one sentence and exit 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.exc import OperationalError
from typer.core import TyperGroup

from ferret.cli.api_commands import apikey_app, audit_app, serve
from ferret.cli.ask_commands import ask, reader_app
from ferret.cli.config_commands import config_app
from ferret.cli.index_commands import index_app
from ferret.cli.job_commands import jobs_app, worker
from ferret.cli.job_runs import ASYNC_HELP, run_command_job
from ferret.cli.pipeline_commands import pipeline_app
from ferret.cli.quickstart import run_quickstart
from ferret.cli.realm_commands import realm_app
from ferret.cli.render import console, err_console, eval_table, print_results
from ferret.cli.source_commands import source_app
from ferret.cli.task_commands import task_app
from ferret.cli.ui_commands import admin, tui
from ferret.core.db import migrate
from ferret.core.db.corpus import corpus_counts, get_corpus, get_or_create_corpus, list_corpora
from ferret.core.db.source import expand_principals
from ferret.core.errors import FerretError, InvalidInputError
from ferret.core.eval.evaluate import evaluate_dataset
from ferret.core.search.configuration import plan_by_name
from ferret.core.settings import get_settings
from ferret.runtime.context import app_context

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


SQLITE_BUSY = (
    "The embedded database stayed locked by another Ferret process (a long `ferret ingest`, `index build` or "
    "`pipeline run`) past the busy timeout; run this again once it has finished, or use PostgreSQL "
    "(FERRET_DATABASE_URL) for concurrent writers."
)


class _FerretGroup(TyperGroup):
    """Turns a user error anywhere below into one sentence and exit status 1; bugs keep their traceback.

    A SQLite database still locked after the busy timeout is no bug but a collision of two processes sharing the
    embedded store, so it gets its sentence too (the index's own collision is ``UnavailableError``)."""

    def invoke(self, ctx: Any) -> Any:  # typer >= 0.20 vendors click: its Context type varies
        try:
            return super().invoke(ctx)
        except FerretError as exc:
            err_console.print(f"[red]Error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None
        except OperationalError as exc:
            if "database is locked" not in str(exc.orig):
                raise
            err_console.print(f"[red]Error:[/red] {SQLITE_BUSY}", highlight=False)
            raise typer.Exit(1) from None


app = typer.Typer(cls=_FerretGroup, help="Ferret: a search engine trained on your own documents.", no_args_is_help=True)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(index_app, name="index")
app.add_typer(config_app, name="config")
app.add_typer(jobs_app, name="jobs")
app.command()(worker)
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(realm_app, name="realm")
app.command("ask")(ask)
app.add_typer(reader_app, name="reader")
app.add_typer(task_app, name="task")
app.add_typer(apikey_app, name="apikey")
app.add_typer(source_app, name="source")
app.add_typer(audit_app, name="audit")
app.command()(serve)
app.command()(tui)
app.command()(admin)


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations (PostgreSQL in production; the embedded SQLite migrates itself)."""
    settings = get_settings()
    settings.ensure_home()
    migrate.upgrade(settings.database_url, revision)
    console.print(f"database at revision {migrate.current_revision(settings.database_url)}")


@db_app.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION ('base' empties the database)."""
    migrate.downgrade(get_settings().database_url, revision)
    console.print(f"database at revision {migrate.current_revision(get_settings().database_url) or 'base'}")


@app.command()
def ingest(
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus name; created when new.")],
    path: Annotated[Path | None, typer.Option(help="A folder of txt, md, html, pdf and docx files.")] = None,
    beir: Annotated[Path | None, typer.Option(help="A BEIR dataset folder (corpus.jsonl).")] = None,
    source: Annotated[str | None, typer.Option(help="Source name within the corpus.")] = None,
    incremental: Annotated[bool, typer.Option(help="Only changes since the last run (filesystem).")] = False,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Load documents into a corpus; unchanged documents are skipped, removed ones deleted everywhere (a job)."""
    if (path is None) == (beir is None):
        raise InvalidInputError("Give exactly one of --path DIR or --beir DIR.")
    kind, config = ("filesystem", {"root": str(path)}) if path is not None else ("beir", {"path": str(beir)})
    config["name"] = source or kind
    with app_context() as ctx:
        corpus_row = get_or_create_corpus(
            ctx.session,
            corpus,
            max_passage_tokens=ctx.settings.max_passage_tokens,
            passage_overlap_tokens=ctx.settings.passage_overlap_tokens,
        )
        job = run_command_job(
            ctx, "ingest", detach=detach, corpus=corpus_row, source_kind=kind, config=config, incremental=incremental
        )
        if job is None:
            return
        report = job.result or {}
        console.print(
            f"added {report.get('added', 0)}, updated {report.get('updated', 0)}, "
            f"unchanged {report.get('unchanged', 0)}, deleted {report.get('deleted', 0)}; "
            f"passages +{report.get('passages_added', 0)} -{report.get('passages_deleted', 0)}; "
            f"skipped {len(report.get('skipped', []))} (job {job.id})"
        )
        for item in report.get("skipped", []):
            console.print(f"  skipped {item['external_id']}: {item['reason']}", highlight=False)


@app.command()
def corpora() -> None:
    """List corpora with their document and passage counts."""
    with app_context() as ctx:
        for corpus in list_corpora(ctx.session):
            documents, passages = corpus_counts(ctx.session, corpus)
            console.print(f"{corpus.name}: {documents} documents, {passages} passages")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus to search (its active index version).")],
    k: Annotated[int, typer.Option("--k", "-k", help="Number of documents.")] = 10,
    mode: Annotated[str | None, typer.Option(help="dense, sparse or hybrid (default from settings).")] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="Search as a member of this group (and public); repeatable."),
    ] = None,
    config: Annotated[
        str | None, typer.Option("--config", help="A search configuration: 'base' or a version (default: active).")
    ] = None,
    all_groups: Annotated[
        bool, typer.Option("--all-groups", help="Search every document, whatever its groups (an administrator's view).")
    ] = False,
) -> None:
    """Search a corpus with its active search configuration (or an explicit one, for comparisons); as `public`
    only, unless --group or --all-groups is given."""
    if all_groups and group:
        raise InvalidInputError("--all-groups already sees every group; leave out --group, or --all-groups.")
    acl_groups = None if all_groups else list(group or [])  # the searcher adds public to any list
    with app_context() as ctx:
        # A principal such as user:ann@corp.example also searches as the groups the sources reported for it.
        groups = expand_principals(ctx.session, group) if acl_groups is not None and group else acl_groups
        plan = plan_by_name(ctx.session, get_corpus(ctx.session, corpus), config) if config else None
        results = ctx.searcher.search(corpus, query, k=k, mode=mode, acl_groups=groups, plan=plan)
        print_results(query, results)


@app.command("eval")
def evaluate(
    dataset: Annotated[Path, typer.Option(help="A BEIR dataset folder.")],
    split: Annotated[str, typer.Option(help="qrels split: test, dev or train.")] = "test",
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model versions (default: base).")] = None,
    corpus: Annotated[str | None, typer.Option(help="Corpus name (default: beir-<folder>).")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the rows as JSON here.")] = None,
) -> None:
    """nDCG@10, Recall@100 and MRR@10 of bm25s and of each search mode of each model, side by side."""
    if not dataset.is_dir():
        raise InvalidInputError(f"Dataset folder {dataset} does not exist.")
    with app_context() as ctx:
        rows = evaluate_dataset(
            ctx.session,
            ctx.settings,
            ctx.backend,
            dataset,
            connectors=ctx.connectors,
            split=split,
            models=model or ["base"],
            corpus_name=corpus,
            status=lambda message: err_console.print(f"[dim]{message}[/dim]"),
        )
    console.print(eval_table(f"{dataset.name} ({split})", rows))
    if json_path is not None:
        json_path.write_text(json.dumps([row.as_dict() for row in rows], indent=2))


@app.command()
def quickstart(
    home: Annotated[Path | None, typer.Option(help="FERRET_HOME to use (default: the configured one).")] = None,
    train: Annotated[bool, typer.Option(help="Also run the few-shot training pipeline on the demo task.")] = True,
) -> None:
    """The main job on the demo corpus: ingest, index, search, evaluate, and train from 8 examples."""
    run_quickstart(home, train=train)


def main() -> None:
    app()
