"""``ferret jobs`` (list, show, follow, retry, cancel) and ``ferret worker --kind gpu|llm|cpu`` (a Celery worker)."""

from __future__ import annotations

import importlib
import json
from typing import Annotated

import typer
from rich.table import Table

from ferret.cli.job_runs import ASYNC_HELP, follow_here, follow_job, require_success
from ferret.cli.render import console, err_console
from ferret.core.db.job import get_job, list_jobs
from ferret.core.db.models import Job
from ferret.core.errors import InvalidInputError
from ferret.core.jobs.queue import Placement
from ferret.core.settings import get_settings
from ferret.runtime.context import app_context, ensure_schema

jobs_app = typer.Typer(help="Long work (pipelines, ingests, index builds) and its progress.", no_args_is_help=True)

WORKER_KINDS = ("gpu", "llm", "cpu")
EMBEDDED_STORE_WARNING = (
    "This worker keeps vectors in the embedded store (FERRET_QDRANT_URL is not set), which one process opens at a "
    "time: a job that reads or writes a corpus's index fails while `ferret serve`, another worker or `ferret tui` "
    "has that corpus open. Beside a server or other workers, set FERRET_QDRANT_URL to a Qdrant server."
)


def _when(job: Job) -> str:
    return job.created_at.strftime("%Y-%m-%d %H:%M:%S") if job.created_at else "-"


@jobs_app.command("list")
def list_command(
    corpus: Annotated[str | None, typer.Option("--corpus", "-c", help="Only jobs of this corpus.")] = None,
    state: Annotated[str | None, typer.Option(help="queued, running, succeeded, failed or cancelled.")] = None,
    limit: Annotated[int, typer.Option(help="Newest jobs shown.")] = 50,
) -> None:
    """The newest jobs with their state, stage and progress."""
    with app_context() as ctx:
        table = Table(title="jobs")
        # No column of stage runs: a pipeline that ran once shows 6, which read as six tries (`jobs show` has it).
        for column in ("id", "kind", "state", "stage", "progress", "created", "error"):
            table.add_column(column)
        for job in list_jobs(ctx.session, corpus=corpus, state=state, limit=limit):
            table.add_row(
                str(job.id),
                job.kind,
                job.state.value + (" (cancel requested)" if job.cancel_requested and job.state == "running" else ""),
                job.stage or "-",
                f"{100 * job.progress:.0f}%",
                _when(job),
                (job.error or "")[:60],
            )
        console.print(table)


@jobs_app.command("show")
def show(job_id: Annotated[int, typer.Argument(help="Job id (see `ferret jobs list`).")]) -> None:
    """Everything about one job: parameters, progress, counts, error and result."""
    with app_context() as ctx:
        job = get_job(ctx.session, job_id)
        console.print(
            f"job {job.id} ({job.kind}): {job.state.value}, stage {job.stage or '-'}, {100 * job.progress:.0f}%"
        )
        console.print(
            f"stage runs {job.attempts} (one per stage run; more after a step's retry or a worker that died), "
            f"cancel requested {job.cancel_requested}, celery id {job.celery_id}"
        )
        console.print(f"created {_when(job)}, started {job.started_at or '-'}, finished {job.finished_at or '-'}")
        if job.error:
            console.print(f"[red]error:[/red] {job.error}", highlight=False)
        for label, value in (("params", job.params), ("counts", job.counts), ("result", job.result)):
            if value:
                console.print(f"{label}: {json.dumps(value, indent=2, default=str)}", highlight=False)


@jobs_app.command("follow")
def follow(job_id: Annotated[int, typer.Argument(help="Job id (see `ferret jobs list`).")]) -> None:
    """Show a job's progress until it ends; exit status 0 when it succeeded, 1 when it failed or was cancelled."""
    with app_context() as ctx:
        get_job(ctx.session, job_id)  # an unknown id is one sentence, before any progress is drawn
        job = follow_job(ctx.settings, job_id)
        console.print(f"job {job.id} ({job.kind}): {job.state.value}", highlight=False)
        require_success(job)


@jobs_app.command("retry")
def retry(
    job_id: Annotated[int, typer.Argument(help="A failed or cancelled job (see `ferret jobs list`).")],
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Run a failed or cancelled job again as the same job: what it finished before is found again, not redone."""
    with app_context() as ctx:
        job = ctx.jobs.retry_job(ctx.session, job_id, placement=Placement.DETACHED if detach else Placement.HERE)
        if detach:
            console.print(f"job {job.id} ({job.kind}) started again; follow it with `ferret jobs follow {job.id}`")
            return
        finished = require_success(follow_here(ctx, job.id))
        console.print(f"job {finished.id} ({finished.kind}): {finished.state.value}", highlight=False)


@jobs_app.command("cancel")
def cancel(
    job_id: Annotated[int, typer.Argument(help="Job id (see `ferret jobs list`).")],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Mark a running job cancelled now, without waiting for its worker: for a job whose Celery worker "
            "died (its task comes back only after the broker's visibility timeout); then `ferret jobs retry` it.",
        ),
    ] = False,
) -> None:
    """Cancel a job: a queued one at once, a running one at its next progress report."""
    with app_context() as ctx:
        job = ctx.jobs.cancel_job(ctx.session, job_id, force=force)
        verdict = "cancelled" if job.state == "cancelled" else "cancel requested; it stops at its next progress report"
        console.print(f"job {job.id}: {verdict}")


def worker(
    kind: Annotated[str, typer.Option("--kind", "-k", help="gpu (training, indexing), llm (generation) or cpu.")],
    concurrency: Annotated[
        int | None, typer.Option(help="Processes (default: 1 for gpu, 2 for llm, one per core for cpu).")
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Node name (default: <kind>@<host>).")] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "info",
) -> None:
    """Run a Celery worker of one kind on its queue (needs FERRET_BROKER_URL)."""
    # Here, not at the top: the queue names come from the job catalogue, whose one-step jobs import the ingest, the
    # index build and the evaluation (numpy, scipy, bm25s: a fifth of `ferret jobs list`'s second, of no use to it).
    from ferret.workers.names import DEFAULT_CONCURRENCY, QUEUE_OF_KIND, WorkerKind

    if kind not in WORKER_KINDS:
        raise InvalidInputError(f"--kind must be one of {', '.join(WORKER_KINDS)}, not {kind!r}.")
    settings = get_settings()
    if not settings.broker_url:
        raise InvalidInputError("FERRET_BROKER_URL is not set; a worker needs a broker (e.g. redis://host:6379/0).")
    settings.ensure_home()
    ensure_schema(settings)  # the embedded SQLite migrates itself; a server database must be at the newest revision
    if not settings.qdrant_url:
        err_console.print(EMBEDDED_STORE_WARNING, style="yellow", highlight=False)
    worker_kind = WorkerKind(kind)
    # Imported by name, and only here: Celery is the optional ``workers`` extra, and each kind is its own app.
    app = importlib.import_module(f"ferret.workers.apps.{kind}").app
    argv = ["worker", "--queues", str(QUEUE_OF_KIND[worker_kind]), "--hostname", hostname or f"{kind}@%h"]
    argv += ["--loglevel", loglevel, "--prefetch-multiplier", "1"]
    processes = concurrency or DEFAULT_CONCURRENCY[worker_kind]
    if processes is not None:
        argv += ["--concurrency", str(processes)]
    app.worker_main(argv)
