"""``ferret``: ingest, index, search and evaluate from the terminal.

User mistakes print one sentence and exit 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferret.cli.group import FerretGroup, LazyCommand
from ferret.cli.logs import PROGRESS_BAR_SWITCHES, route_third_party_output
from ferret.cli.options import ASYNC_HELP

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _switch in PROGRESS_BAR_SWITCHES:  # read by huggingface_hub, transformers and datasets when first imported
    os.environ.setdefault(_switch, "1")

# Only typer is imported at start: every command imports what it needs when it runs (issue 11, item 9), so
# `ferret --help` starts in well under a second and `ferret search` loads no more than a search needs.
DOCUMENTS, TRAINING, OPERATIONS = "Documents and search", "Training", "Serving and operations"

LAZY_COMMANDS = (
    LazyCommand(
        "source",
        "ferret.cli.source_commands:source_app",
        "Configured sources (S3, SMB, web, SQL, Git, Confluence, SharePoint...).",
        DOCUMENTS,
    ),
    LazyCommand(
        "corpus",
        "ferret.cli.corpus_commands:corpus_app",
        "Delete a corpus with its documents, index versions and configurations.",
        DOCUMENTS,
    ),
    LazyCommand(
        "index", "ferret.cli.index_commands:index_app", "Versioned index collections behind one alias.", DOCUMENTS
    ),
    LazyCommand(
        "config",
        "ferret.cli.config_commands:config_app",
        "Search configurations: retriever, fusion and reranker as one unit.",
        DOCUMENTS,
    ),
    LazyCommand(
        "task",
        "ferret.cli.task_commands:task_app",
        "Retrieval tasks: a description and 2-8 examples for query generation.",
        TRAINING,
    ),
    LazyCommand(
        "pipeline",
        "ferret.cli.pipeline_commands:pipeline_app",
        "Train a retriever for a task from its examples.",
        TRAINING,
    ),
    LazyCommand(
        "realm",
        "ferret.cli.realm_commands:realm_app",
        "REALM retrieval-augmented pre-training (no examples needed).",
        TRAINING,
    ),
    LazyCommand(
        "ask",
        "ferret.cli.ask_commands:ask",
        "Answer a question from the corpus: the served retriever finds passages, the span reader reads them, and the "
        "answer comes with the passages that support it and their retrieval probabilities.",
        DOCUMENTS,
    ),
    LazyCommand(
        "reader", "ferret.cli.ask_commands:reader_app", "The span reader that `ferret ask` answers with.", TRAINING
    ),
    LazyCommand(
        "jobs",
        "ferret.cli.job_commands:jobs_app",
        "Long work (pipelines, ingests, index builds) and its progress.",
        OPERATIONS,
    ),
    LazyCommand(
        "serve", "ferret.cli.api_commands:serve", "Run the HTTP API (OpenAPI at /docs and /openapi.json).", OPERATIONS
    ),
    LazyCommand(
        "worker",
        "ferret.cli.job_commands:worker",
        "Run a Celery worker of one kind on its queue (needs FERRET_BROKER_URL).",
        OPERATIONS,
    ),
    LazyCommand(
        "apikey", "ferret.cli.api_commands:apikey_app", "API keys of the HTTP API: scopes and ACL groups.", OPERATIONS
    ),
    LazyCommand(
        "audit",
        "ferret.cli.api_commands:audit_app",
        "The audit trail: key, index version and search configuration changes.",
        OPERATIONS,
    ),
    LazyCommand(
        "admin",
        "ferret.cli.ui_commands:admin",
        "Run the Streamlit admin (no login of its own: keep it on 127.0.0.1 or behind an authenticating proxy).",
        OPERATIONS,
    ),
    LazyCommand(
        "tui",
        "ferret.cli.ui_commands:tui",
        "Search as you type in the terminal (F1 for the keys); works over SSH in 80×24.",
        OPERATIONS,
    ),
)


class _Ferret(FerretGroup):
    """The ``ferret`` group: the commands of this module, the lazy ones above, listed in a new user's order."""

    lazy_commands = LAZY_COMMANDS
    order = (
        "quickstart", "ingest", "source", "corpora", "corpus", "index", "search", "ask", "config", "eval",
        "task", "pipeline", "realm", "reader",
        "jobs", "serve", "worker", "apikey", "audit", "admin", "tui", "db",
    )  # fmt: skip


app = typer.Typer(cls=_Ferret, help="Ferret: a search engine trained on your own documents.", no_args_is_help=True)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
app.add_typer(db_app, name="db", rich_help_panel=OPERATIONS)


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations (PostgreSQL in production; the embedded SQLite migrates itself)."""
    from ferret.cli.render import console
    from ferret.core.db import migrate
    from ferret.core.settings import get_settings

    settings = get_settings()
    settings.ensure_home()
    migrate.upgrade(settings.database_url, revision)
    console.print(f"database at revision {migrate.current_revision(settings.database_url)}")


@db_app.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION ('base' empties the database)."""
    from ferret.cli.render import console
    from ferret.core.db import migrate
    from ferret.core.settings import get_settings

    migrate.downgrade(get_settings().database_url, revision)
    console.print(f"database at revision {migrate.current_revision(get_settings().database_url) or 'base'}")


@app.command(rich_help_panel=DOCUMENTS)
def ingest(
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus name; created when new.")],
    path: Annotated[
        Path | None, typer.Option(help="A folder of txt, md, rst, csv, html, pdf, docx, pptx and xlsx files.")
    ] = None,
    beir: Annotated[Path | None, typer.Option(help="A BEIR dataset folder (corpus.jsonl).")] = None,
    source: Annotated[str | None, typer.Option(help="Source name within the corpus.")] = None,
    incremental: Annotated[bool, typer.Option(help="Only changes since the last run (filesystem).")] = False,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Load documents into a corpus; unchanged documents are skipped, removed ones deleted everywhere (a job)."""
    from ferret.cli.job_runs import run_command_job
    from ferret.cli.render import console
    from ferret.core.db.corpus import find_corpus, forget_empty_corpus, get_or_create_corpus
    from ferret.core.db.index_version import active_index_version
    from ferret.core.errors import FerretError, InvalidInputError
    from ferret.core.sources.capabilities import SlimConnector
    from ferret.runtime.context import app_context

    if (path is None) == (beir is None):
        raise InvalidInputError("Give exactly one of --path DIR or --beir DIR.")
    folder, option = (path, "--path") if path is not None else (beir, "--beir")
    assert folder is not None  # exactly one was given
    if not folder.is_dir():  # named by the option, not by the connector's config key
        raise InvalidInputError(f"{option} {folder} {'is not a folder' if folder.exists() else 'does not exist'}.")
    config: dict[str, Any]
    # Stored absolute: a later run from another folder (or a detached runner) reads the same place.
    where = str(folder.expanduser().resolve())
    kind, config = ("filesystem", {"root": where}) if path is not None else ("beir", {"path": where})
    config["name"] = source or kind
    with app_context() as ctx:
        if kind == "filesystem":
            config["max_file_bytes"] = ctx.settings.max_file_bytes  # FERRET_MAX_FILE_BYTES
        connector = ctx.connectors(kind, **config)
        new = find_corpus(ctx.session, corpus) is None
        if new and isinstance(connector, SlimConnector) and next(iter(connector.list_external_ids()), None) is None:
            readable = (
                "txt, md, rst, csv, html, pdf, docx, pptx or xlsx file (hidden ones are left out)"
                if path
                else "corpus.jsonl line"
            )
            raise InvalidInputError(f"{option} {folder} holds no {readable}, so corpus {corpus!r} was not created.")
        corpus_row = get_or_create_corpus(
            ctx.session,
            corpus,
            max_passage_tokens=ctx.settings.max_passage_tokens,
            passage_overlap_tokens=ctx.settings.passage_overlap_tokens,
        )
        try:
            job = run_command_job(
                ctx,
                "ingest",
                detach=detach,
                corpus=corpus_row,
                source_kind=kind,
                config=config,
                incremental=incremental,
                created_corpus=new,
            )
        except FerretError:
            if new:
                forget_empty_corpus(ctx.session, corpus_row)
            raise
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
        if active_index_version(ctx.session, corpus_row) is None:  # the documents are stored, not yet searchable
            console.print(f"next: `ferret index build --corpus {corpus_row.name} --promote` makes them searchable")


@app.command(rich_help_panel=DOCUMENTS)
def corpora() -> None:
    """List corpora with their document and passage counts."""
    from ferret.cli.render import console
    from ferret.core.db.corpus import corpus_counts, list_corpora
    from ferret.runtime.context import app_context

    with app_context() as ctx:
        corpora = list_corpora(ctx.session)
        if not corpora:
            console.print("no corpus yet: `ferret ingest --corpus NAME --path DIR` makes one", highlight=False)
        for corpus in corpora:
            documents, passages = corpus_counts(ctx.session, corpus)
            console.print(f"{corpus.name}: {documents} documents, {passages} passages")


@app.command(rich_help_panel=DOCUMENTS)
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
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON, in the shape of the HTTP API's search.")
    ] = False,
) -> None:
    """Search a corpus with its active search configuration (or an explicit one, for comparisons).

    As `public` only, unless --group or --all-groups is given."""
    import dataclasses
    import json

    from ferret.cli.render import print_results
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.source import expand_principals
    from ferret.core.errors import InvalidInputError
    from ferret.core.search.configuration import plan_by_name
    from ferret.core.search.fusion import DEFAULT_FUSION
    from ferret.core.search.snippets import snippet_and_highlights
    from ferret.runtime.context import app_context

    if all_groups and group:
        raise InvalidInputError("--all-groups already sees every group; leave out --group, or --all-groups.")
    acl_groups = None if all_groups else list(group or [])  # the searcher adds public to any list
    with app_context() as ctx:
        # A principal such as user:ann@corp.example also searches as the groups the sources reported for it.
        groups = expand_principals(ctx.session, group) if acl_groups is not None and group else acl_groups
        plan = plan_by_name(ctx.session, get_corpus(ctx.session, corpus), config) if config else None
        results = ctx.searcher.search(corpus, query, k=k, mode=mode, acl_groups=groups, plan=plan)
        if as_json:
            hits = []
            for result in results:
                snippet, highlights = snippet_and_highlights(result.text, query)
                hits.append({**dataclasses.asdict(result), "snippet": snippet, "highlights": highlights})
            answer = {"corpus": corpus, "query": query, "mode": ctx.searcher.mode(mode), "results": hits}
            print(json.dumps(answer, ensure_ascii=False, indent=2))
            hint_scoped_groups(ctx.session, group or [])
            return
        used = plan or ctx.searcher.active_plans.get(corpus, ctx.searcher.sessions)  # what made the scores
        print_results(query, results, ctx.searcher.mode(mode), used.fusion if used is not None else DEFAULT_FUSION)
        hint_scoped_groups(ctx.session, group or [])


def hint_scoped_groups(session: Session, groups: list[str]) -> None:
    """One line on stderr for each --group that no document or membership holds while ``<source>:group:<it>`` does:
    a source's groups carry its name, so ``--group hr`` found only public documents."""
    from ferret.cli.render import err_console
    from ferret.core.db.source import scoped_groups_named

    for name in groups:
        scoped = scoped_groups_named(session, name)
        if scoped:
            options = " ".join(f"--group {group}" for group in scoped)
            err_console.print(
                f"hint: no document or membership names group {name!r}, so it matched public documents only; a "
                f"source's groups carry its name: {options}",
                highlight=False,
                markup=False,
            )


@app.command("eval", rich_help_panel=DOCUMENTS)
def evaluate(
    dataset: Annotated[Path, typer.Option(help="A BEIR dataset folder.")],
    split: Annotated[str, typer.Option(help="qrels split: test, dev or train.")] = "test",
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model versions (default: base).")] = None,
    corpus: Annotated[str | None, typer.Option(help="Corpus name (default: beir-<folder>).")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the rows as JSON here.")] = None,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """nDCG@10, Recall@100 and MRR@10 of bm25s and of each search mode of each model, side by side (a job)."""
    import json

    from ferret.cli.job_runs import run_command_job
    from ferret.cli.render import console, eval_table
    from ferret.core.errors import InvalidInputError
    from ferret.core.eval.evaluate import EvalRow
    from ferret.runtime.context import app_context

    if not dataset.is_dir():
        raise InvalidInputError(f"Dataset folder {dataset} does not exist.")
    with app_context() as ctx:
        job = run_command_job(
            ctx, "eval", detach=detach, dataset=dataset, split=split, models=model or ["base"], corpus=corpus
        )
    if job is None:
        return
    rows = [EvalRow(**row) for row in (job.result or {}).get("rows", [])]
    console.print(eval_table(f"{dataset.name} ({split})", rows))
    for note in (job.result or {}).get("notes", []):
        console.print(f"note: {note}", highlight=False)
    if json_path is not None:
        json_path.write_text(json.dumps([row.as_dict() for row in rows], indent=2))


@app.command(rich_help_panel=DOCUMENTS)
def quickstart(
    home: Annotated[Path | None, typer.Option(help="FERRET_HOME to use (default: the configured one).")] = None,
    train: Annotated[bool, typer.Option(help="Also run the few-shot training pipeline on the demo task.")] = True,
) -> None:
    """The main job on the demo corpus: ingest, index, search, evaluate, and train from 8 examples."""
    from ferret.cli.quickstart import run_quickstart

    run_quickstart(home, train=train)


_OLD_PROMOTE = {"auto": "--promote", "force": "--force-promote", "never": "--no-promote"}


def modern_spelling(args: list[str]) -> list[str]:
    """Arguments with deprecated spellings replaced, each announced in one line on stderr.

    ``pipeline run --promote auto|force|never`` (issue 11, item 12): ``--promote`` is now the flag that ``index
    build`` has too, with ``--no-promote`` and ``--force-promote``."""
    if args[:2] != ["pipeline", "run"]:
        return args
    modern: list[str] = []
    position = 0
    while position < len(args):
        arg, value = args[position], None  # value: an old --promote value
        if arg.startswith("--promote="):
            value = arg.partition("=")[2]
        elif arg == "--promote" and position + 1 < len(args) and args[position + 1] in _OLD_PROMOTE:
            position += 1
            value = args[position]
        if value is not None and value in _OLD_PROMOTE:
            arg = _OLD_PROMOTE[value]
            print(f"`--promote {value}` is deprecated; write `{arg}`.", file=sys.stderr)
        modern.append(arg)
        position += 1
    return modern


def main() -> None:
    """The console script: third-party output goes to the log file (``ferret.cli.logs``), then the command runs."""
    route_third_party_output()
    app(args=modern_spelling(sys.argv[1:]))
