"""``ferret realm pretrain | status``: REALM pre-training of a corpus's retriever, run as a job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer
from rich.markup import escape
from rich.table import Table

from ferret.cli.job_runs import ASYNC_HELP, follow_here, require_success
from ferret.cli.render import console
from ferret.core.db.corpus import get_corpus
from ferret.core.db.job import get_job, list_jobs
from ferret.core.db.models import Job, JobState
from ferret.core.errors import InvalidInputError
from ferret.core.jobs.queue import Placement
from ferret.core.pipeline.realm.state import JOB_REALM
from ferret.core.realm.config import RealmConfig
from ferret.core.realm.masking import MaskingStrategy
from ferret.runtime.context import app_context

realm_app = typer.Typer(help="REALM retrieval-augmented pre-training (no examples needed).", no_args_is_help=True)

_DEFAULTS = RealmConfig()


@realm_app.command("pretrain")
def pretrain(
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Corpus to pre-train on.")],
    steps: Annotated[int, typer.Option(help="REALM training steps.")] = _DEFAULTS.steps,
    k: Annotated[int | None, typer.Option(help="Passages retrieved per sentence (default 8 GPU / 4 CPU).")] = None,
    batch_size: Annotated[int, typer.Option(help="Masked sentences per step.")] = _DEFAULTS.batch_size,
    masking: Annotated[str, typer.Option(help="salient, random_token or random_span.")] = _DEFAULTS.masking,
    refresh_every: Annotated[int, typer.Option(help="Steps between index refreshes.")] = _DEFAULTS.refresh_every,
    eval_every: Annotated[int, typer.Option(help="Steps between retrieval-utility checks.")] = _DEFAULTS.eval_every,
    checkpoint_every: Annotated[int, typer.Option(help="Steps between checkpoints.")] = _DEFAULTS.checkpoint_every,
    mlm_warmup_steps: Annotated[int, typer.Option(help="Plain MLM steps for the reader.")] = _DEFAULTS.mlm_warmup_steps,
    ict_warmup_steps: Annotated[int, typer.Option(help="Inverse Cloze Task steps first.")] = _DEFAULTS.ict_warmup_steps,
    freeze_doc_tower: Annotated[bool, typer.Option(help="Train the query tower only.")] = False,
    base_weight: Annotated[float, typer.Option(help="WiSE-FT share of the base model.")] = _DEFAULTS.base_weight,
    task: Annotated[str | None, typer.Option(help="Judge the result on this task's evidence.")] = None,
    model_name: Annotated[str | None, typer.Option(help="Name of the new model version.")] = None,
    resume: Annotated[int | None, typer.Option(help="Resume a killed REALM job from its checkpoint.")] = None,
    detach: Annotated[bool, typer.Option("--async", help=ASYNC_HELP)] = False,
) -> None:
    """Pre-train the retriever on the corpus with REALM, register it as a model version and run the guard."""
    config = RealmConfig(
        steps=steps,
        k=k,
        batch_size=batch_size,
        masking=cast(MaskingStrategy, masking),
        refresh_every=refresh_every,
        eval_every=eval_every,
        checkpoint_every=checkpoint_every,
        mlm_warmup_steps=mlm_warmup_steps,
        ict_warmup_steps=ict_warmup_steps,
        freeze_doc_tower=freeze_doc_tower,
        base_weight=base_weight,
    ).validated()
    with app_context() as ctx:
        corpus_row = get_corpus(ctx.session, corpus)
        # With a broker the gpu workers run it (this command returns); in embedded mode this process runs it and
        # stays to show it, unless --async hands it to a detached runner.
        placement = Placement.DETACHED if detach or ctx.settings.broker_url else Placement.HERE
        job = ctx.jobs.start_job(
            JOB_REALM,
            ctx.session,
            placement=placement,
            corpus=corpus_row,
            config=config,
            model_name=model_name,
            task=task,
            resume_from=resume,
        )
        console.print(f"job {job.id}: REALM pre-training of {corpus_row.name} into model {job.params['model_name']}")
        if placement == Placement.DETACHED:
            where = "on the gpu workers" if ctx.settings.broker_url else "in a detached local runner"
            console.print(f"running {where}; follow it with `ferret jobs follow {job.id}` or `ferret realm status`")
            return
        finished = follow_here(ctx, job.id)
        _print_job(finished, show_error=False)  # require_success says it, once
        require_success(finished)


@realm_app.command("status")
def status(
    job_id: Annotated[int | None, typer.Argument(help="A REALM job id; all recent ones if left out.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the job's RU-by-step curve to this PNG.")] = None,
) -> None:
    """REALM jobs with their progress, retrieval utility and guard verdict."""
    if plot is not None and job_id is None:
        raise InvalidInputError("--plot draws one job's curve; give the job id too.")
    with app_context() as ctx:
        if job_id is not None:
            job = get_job(ctx.session, job_id)
            _print_job(job)
            if plot is not None:
                from ferret.core.realm.plot import plot_utility

                utility = (job.result or {}).get("utility", [])
                plot_utility({str(job.params.get("model_name")): utility}, plot, title=f"REALM job {job.id}")
                console.print(f"RU curve: {plot}")
            return
        table = Table(title="REALM pre-training jobs")
        for column in ("id", "state", "progress", "model", "step", "staleness", "best RU"):
            table.add_column(column, no_wrap=column == "model")  # a model name is what `--init realm:` takes
        jobs = [job for job in list_jobs(ctx.session, limit=200) if job.kind == JOB_REALM][:20]
        for job in jobs:
            best = (job.result or {}).get("best_utility")
            table.add_row(
                str(job.id),
                job.state.value,
                f"{100 * job.progress:.0f}%",
                str(job.params.get("model_name")),
                str(job.counts.get("step", "-")),
                str(job.counts.get("staleness", "-")),
                f"{best:+.3f}" if isinstance(best, float) else "-",
            )
        console.print(table)
        for job in jobs:  # in full below the table: a column wrapped each sentence over many narrow lines
            if job.error:
                console.print(f"job {job.id}: {job.error}", highlight=False, markup=False)


def _print_job(job: Job, *, show_error: bool = True) -> None:
    corpus = str((job.params.get("state") or {}).get("corpus", "<corpus>"))
    console.print(f"job {job.id}: {job.state.value}, {100 * job.progress:.0f}%, model {job.params.get('model_name')}")
    if job.state == JobState.FAILED:
        if show_error:
            console.print(f"[red]failed:[/] {escape(job.error or '')}")
        if "step" in job.counts:  # it trained: a resume continues the run (a refused setting would fail again)
            console.print(f"resume it with `ferret realm pretrain --corpus {corpus} --resume {job.id}`")
    result = job.result or {}
    if not result:
        return
    curve = ", ".join(f"{u['step']}: {u['retrieval_utility']:+.3f}" for u in result.get("utility", []))
    console.print(f"retrieval utility on held-out sentences by step: {curve}")
    console.print(
        f"best RU {result.get('best_utility', 0):+.3f} at step {result.get('best_step')}; index staleness "
        f"{result.get('staleness_mean', 0):.1f} steps on average; refreshes {result.get('refreshes')} "
        f"(failed {result.get('failed_refreshes')})"
    )
    guard = result.get("guard", {})
    verdict = "[green]passed[/]" if guard.get("passed") else "[yellow]refused[/]"
    console.print(f"guard {verdict}: {guard.get('reason')}")
    console.print(f"use it: ferret index build --corpus {corpus} --model {result.get('model')} --promote")
