"""Long CLI work as jobs (issue 11, item 10): every long command is a job row, seen by `ferret jobs list` and the
admin's Jobs page while it runs.

- Without ``--async`` the command starts its job in a thread of this process (``Placement.HERE``) and follows the
  row until the job ends, showing its progress; its exit status is the job's outcome. Ctrl-C marks the job failed
  (interrupted), ready for ``ferret jobs retry``.
- With ``--async`` the command returns at once: the workers run the job when a broker is configured, a detached
  local runner process otherwise (``Placement.DETACHED``); ``ferret jobs follow ID`` shows it.

Example:
    >>> job = run_command_job(ctx, "index_build", detach=False, corpus=row, model="base", promote=True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer

from ferret.cli.options import ASYNC_HELP as ASYNC_HELP  # re-exported: the command modules import it from here
from ferret.cli.render import console, progress_bar
from ferret.core.db.engine import session_scope
from ferret.core.db.job import FINISHED_STATES, ORPHANED_ERROR, embedded_runner_gone, fail_job, get_job
from ferret.core.db.models import Job, JobState
from ferret.core.errors import FerretError
from ferret.core.jobs.progress import JobInterrupted, interrupt
from ferret.core.jobs.queue import Placement
from ferret.core.settings import FerretSettings
from ferret.runtime.context import AppContext

FOLLOW_INTERVAL_S = 0.5
INTERRUPT_WAIT_S = 30.0
"""How long Ctrl-C waits for the job's thread to stop at its next report (a second Ctrl-C stops waiting)."""


def run_command_job(ctx: AppContext, kind: str, /, *, detach: bool, **inputs: Any) -> Job | None:
    """Start a job of ``kind``; with ``detach`` print its id and return None, else follow it to its end here and
    return the finished row (a failed or cancelled job is the command's one-sentence error)."""
    job = ctx.jobs.start_job(kind, ctx.session, placement=Placement.DETACHED if detach else Placement.HERE, **inputs)
    if detach:
        where = "on the workers" if ctx.settings.broker_url else "in a detached local runner"
        console.print(
            f"job {job.id} ({kind}) started {where}; follow it with `ferret jobs follow {job.id}`, "
            f"stop it with `ferret jobs cancel {job.id}`",
            highlight=False,
        )
        return None
    return require_success(follow_here(ctx, job.id))


def follow_here(ctx: AppContext, job_id: int) -> Job:
    """Follow a job that a thread of this process runs; Ctrl-C marks it failed (interrupted) and exits 130."""
    try:
        return follow_job(ctx.settings, job_id, wait=ctx.jobs.wait)
    except KeyboardInterrupt:
        # The thread stops at its next report and undoes its stage (a first ingest removes its corpus), holding
        # the database meanwhile; only when it does not stop in time is the job marked from here.
        interrupt(job_id)
        try:
            stopped = ctx.jobs.wait(job_id, INTERRUPT_WAIT_S)
        except KeyboardInterrupt:
            stopped = False
        if not stopped:
            with session_scope(ctx.settings.database_url) as session:
                fail_job(session, job_id, JobInterrupted(job_id).args[0])
        console.print(f"job {job_id} interrupted; `ferret jobs retry {job_id}` runs it again")
        raise typer.Exit(130) from None


def follow_job(
    settings: FerretSettings,
    job_id: int,
    *,
    wait: Callable[[int, float], bool] | None = None,
    interval_s: float = FOLLOW_INTERVAL_S,
) -> Job:
    """Show a job's progress from its row until it ends; returns the finished row.

    Whoever runs it (a thread here, a detached runner, a worker) writes the row; a job whose embedded runner on this
    host has died is marked failed here (``ORPHANED_ERROR``) instead of being followed for ever. ``wait`` is the
    queue's wait for a thread of this process (it returns early when the thread ends)."""
    with progress_bar() as bar:
        bar_id = bar.add_task(f"job {job_id}", total=1.0, of="job")
        while True:
            with session_scope(settings.database_url) as session:
                job = get_job(session, job_id)
                if embedded_runner_gone(job):
                    job = fail_job(session, job_id, ORPHANED_ERROR)
                label = _label(job)
                bar.update(bar_id, completed=job.progress, description=label)
                if job.state in FINISHED_STATES:
                    session.expunge(job)
                    return job
            if wait is None:
                time.sleep(interval_s)
            elif wait(job_id, interval_s):
                _close_if_left_running(settings, job_id)


_PROGRESS_KEYS = frozenset({"activity", "stage_progress", "stage_number", "stages"})


def _label(job: Job) -> str:
    """``job 7 ingest: ingesting, added 200, updated 3``: the stage, its activity and a few of the job's counts. A job
    of several stages says which and how far into it (``generate (stage 1 of 6, 60%)``), because the bar beside it is
    the whole job's, each stage weighed by its share of the job's time (``Stage.share``): 60% of the pipeline's
    generation, 70% of its time, is 42% of the job."""
    counts = job.counts or {}
    stage = job.stage or job.state.value
    number, stages, done = (counts.get(key) for key in ("stage_number", "stages", "stage_progress"))
    if (
        job.stage
        and isinstance(stages, int)
        and stages > 1
        and isinstance(number, int)
        and isinstance(done, int | float)
    ):
        stage += f" (stage {number} of {stages}, {done:.0%})"
    parts = [str(counts["activity"])] if counts.get("activity") else []
    parts += [
        f"{key.replace('_', ' ')} {value}"
        for key, value in counts.items()
        if key not in _PROGRESS_KEYS and isinstance(value, int | float) and not isinstance(value, bool)
    ][:4]
    return f"job {job.id} {job.kind}: {stage}" + (f", {', '.join(parts)}" if parts else "")


def _close_if_left_running(settings: FerretSettings, job_id: int) -> None:
    """The thread running the job ended: the row must say how; a row still unfinished is a bug, failed here."""
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        if job.state not in FINISHED_STATES:
            fail_job(session, job_id, "The job's thread ended without recording how; see the log.")


def require_success(job: Job) -> Job:
    """The finished job, or its outcome as the command's one-sentence error (exit status 1)."""
    if job.state == JobState.SUCCEEDED:
        return job
    reason = (job.error or job.state.value).rstrip(".")
    raise FerretError(f"Job {job.id} {job.state.value}: {reason}.")
