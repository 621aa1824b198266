"""``ferret quickstart``: the main job end to end on the embedded default, with nothing to configure.

Each long step is a job row, so `ferret jobs list` and the admin show the quickstart as it runs (issue 11, item 10):

1. ingest the bundled demo corpus and index it with the base model in a versioned embedded Qdrant collection;
2. show a few searches and evaluate BM25 against the base model's three search modes on the demo questions;
3. (unless ``--no-train``) run the few-shot Promptagator pipeline on the demo task (8 example questions that are
   not evaluated): generate queries with the embedded generator, filter, fine-tune, guard, index, and promote
   only if the guard measures a gain; then show the searches and the evaluation again, base beside trained.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from ferret.cli.job_runs import run_command_job
from ferret.cli.pipeline_commands import print_result
from ferret.cli.render import console, eval_table, print_results
from ferret.core.db.audit import cli_actor
from ferret.core.db.corpus import get_corpus, get_or_create_corpus
from ferret.core.db.index_version import active_index_version
from ferret.core.db.models import IndexVersion, Job
from ferret.core.db.search_config import active_search_config, list_search_configs
from ferret.core.db.task import find_task
from ferret.core.demo import DEMO_CORPUS, DEMO_DATASET, DEMO_TASK
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.eval.beir import load_queries
from ferret.core.eval.configs import evaluate_plans
from ferret.core.eval.evaluate import EvalRow
from ferret.core.index.types import SearchMode
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.llm.factory import warm_up_in_background
from ferret.core.pipeline.promptagator.in_process import PipelineConfig, pipeline_result
from ferret.core.pipeline.promptagator.state import PipelineState
from ferret.core.search.configuration import SearchPlan, describe, plan_for
from ferret.core.search.fusion import DEFAULT_FUSION
from ferret.core.settings import get_settings
from ferret.core.synth.task_spec import create_task, load_task_spec
from ferret.runtime.context import AppContext, app_context

UNTRAINED = f"untrained default (base, {DEFAULT_FUSION.describe()})"

EXAMPLE_QUERIES = (
    "Which team won Super Bowl 50?",
    "why did arab countries stop selling oil in 1973",
    "what causes the plague",
)
# Sized so the configuration guard can decide (issue 12): 200 documents × 2 queries with 40% of the documents held
# out give it about 60 held-out queries of its own (it needs 50), and the job still fits in minutes on 2 CPU cores.
QUICKSTART_DOCUMENTS = 200
QUICKSTART_QUERIES_PER_DOCUMENT = 2
QUICKSTART_HELD_OUT = 0.4
# About 110 training pairs in batches of 28: 10 steps are 2.5 passes over them. The pipeline's default floor of 20
# steps would double the training's 2.5 minutes on 2 CPU cores for a model the guard judges all the same.
QUICKSTART_TRAINING_STEPS = 10


def run_quickstart(home: Path | None = None, *, train: bool = True) -> None:
    """Each long step is a job (ingest, index build, pipeline, evaluation), so `ferret jobs list` and the admin show
    the quickstart while it runs, as any long command (issue 11, item 10); searches and the final comparison are
    short and run here."""
    if home is not None:
        os.environ["FERRET_HOME"] = str(home)
        get_settings.cache_clear()
    started, cpu_started = time.perf_counter(), time.process_time()
    with app_context() as ctx:
        console.print(f"[bold]Ferret quickstart[/bold]  home: {ctx.settings.home}")
        if train:  # the generator loads while the demo is ingested, indexed and searched
            warm_up_in_background(ctx.settings)
        corpus = get_or_create_corpus(
            ctx.session,
            DEMO_CORPUS,
            description="SQuAD v1.1 dev paragraphs (CC BY-SA 4.0)",
            max_passage_tokens=ctx.settings.max_passage_tokens,
            passage_overlap_tokens=ctx.settings.passage_overlap_tokens,
        )
        config = {"path": str(DEMO_DATASET), "name": "demo"}
        ingested = _job(ctx, "ingest", corpus=corpus, source_kind="beir", config=config)
        _print_report(ingested.result or {})

        base = ModelRegistry(ctx.session, ctx.settings).ensure_base()
        index_version = VersionedCollection(ctx.session, ctx.settings, ctx.backend, corpus).live_version(base)
        if index_version is None:
            promote = active_index_version(ctx.session, corpus) is None
            built = _job(ctx, "index_build", corpus=corpus, model=base.name, promote=promote, actor=cli_actor())
            index_version = ctx.session.get(IndexVersion, (built.result or {})["index_version_id"])
            assert index_version is not None
        console.print(f"index: {index_version.collection} ({index_version.point_count} passages)\n")
        _show_searches(ctx, "searches with the active model")
        models = ["base"]
        if train:
            trained = _train(ctx)
            if trained is not None:
                models.append(trained)
                _show_searches(ctx, "the same searches after the pipeline")
        evaluated = _job(ctx, "eval", dataset=DEMO_DATASET, split="test", models=models, corpus=DEMO_CORPUS)
        rows = [EvalRow(**row) for row in (evaluated.result or {}).get("rows", [])]
        console.print(eval_table(f"demo corpus: {len(load_queries(DEMO_DATASET))} questions", rows))
        if train:
            _compare_configurations(ctx, rows)
    # CPU seconds and the load beside the wall time: on shared cores the wall time measures the queue (issue 12).
    console.print(
        f"done in {time.perf_counter() - started:.0f} s ({time.process_time() - cpu_started:.0f} CPU-seconds, "
        f'load average {os.getloadavg()[0]:.1f}). Try: ferret search --corpus {DEMO_CORPUS} "your question"'
    )


def _job(ctx: AppContext, kind: str, **inputs: Any) -> Job:
    """Run one step as a job in a thread of this process and follow it; a failed step is the command's error.

    The embedded index lets one holder load a shard: this process's own handle lets go of the shards it loaded for
    the searches, so the job can load them (they are loaded again at the next search)."""
    ctx.backend.close()
    ctx.session.commit()  # the job's writes are read afresh afterwards
    job = run_command_job(ctx, kind, detach=False, **inputs)
    assert job is not None  # not detached
    return job


def _train(ctx: AppContext) -> str | None:
    task = find_task(ctx.session, "demo-questions") or create_task(ctx.session, load_task_spec(DEMO_TASK))
    ctx.session.commit()
    console.print(
        f"\n[bold]Few-shot training[/bold] on task {task.name!r} ({len(task.examples)} examples), "
        f"{QUICKSTART_DOCUMENTS} documents, embedded generator"
    )
    config = PipelineConfig(
        max_documents=QUICKSTART_DOCUMENTS,
        queries_per_doc=QUICKSTART_QUERIES_PER_DOCUMENT,
        held_out_fraction=QUICKSTART_HELD_OUT,
        max_steps=QUICKSTART_TRAINING_STEPS,
    )
    job = _job(ctx, "pipeline", task=task, config=config)
    state = {key: value for key, value in (job.result or {}).items() if key != "stages_done"}
    result = pipeline_result(ctx.session, PipelineState.from_json(state))
    print_result(result)
    return result.model.name


def _compare_configurations(ctx: AppContext, rows: list[EvalRow]) -> None:
    """BM25, the untrained default and the configuration search now runs, on the demo questions. The first two are
    the evaluation's own rows (base sparse, base hybrid with the default fusion); only a promoted configuration is
    searched again."""
    scores = {
        "BM25": _metrics(rows, "base", "sparse"),
        UNTRAINED: _metrics(rows, "base", "hybrid"),
    }
    corpus = get_corpus(ctx.session, DEMO_CORPUS)
    active = active_search_config(ctx.session, corpus)
    if active is not None:
        shown = describe(active)
        name = f"configuration {active.version}: {shown['retriever']}, {shown['fusion']}"
        plans: dict[str, tuple[SearchPlan, SearchMode]] = {name: (plan_for(ctx.session, corpus, active), "hybrid")}
        scores.update(evaluate_plans(ctx.searcher, DEMO_CORPUS, DEMO_DATASET, plans))
    table = Table(title="what search runs now, on the demo questions")
    for column in ("search", "nDCG@10", "R@100", "MRR@10"):
        table.add_column(column)
    for name, metrics in scores.items():
        table.add_row(name, *(f"{metrics[m]:.1f}" for m in ("ndcg@10", "recall@100", "mrr@10")))
    console.print(table)
    if active is None:
        newest = list_search_configs(ctx.session, corpus)[-1:]
        reasons = unchanged_reasons(newest[0].evidence) if newest else []
        console.print(
            "no configuration was promoted: the guard found no gain it could trust, so search is unchanged"
            + (":" if reasons else "")
        )
        for reason in reasons:
            console.print(f"  {reason}")
    else:
        gain = scores[name]["ndcg@10"] - scores[UNTRAINED]["ndcg@10"]
        console.print(f"promoted configuration {active.version}: {gain:+.1f} nDCG@10 over the untrained default")


def unchanged_reasons(evidence: dict[str, Any] | None) -> list[str]:
    """Why the pipeline's search configuration was not promoted, from the evidence it stored: how its fusion was
    chosen and the configuration guard's decision (printed again at the end: the pipeline's own lines are far up)."""
    lines = []
    for label, key in (("fusion", "fusion"), ("configuration guard", "guard")):
        part = (evidence or {}).get(key)
        if isinstance(part, dict) and part.get("reason"):
            lines.append(f"{label}: {part['reason']}")
    return lines


def _metrics(rows: list[EvalRow], model: str, mode: SearchMode) -> dict[str, float]:
    return next(row.metrics for row in rows if row.system == "ferret" and row.model == model and row.mode == mode)


def _show_searches(ctx: AppContext, title: str) -> None:
    console.print(f"[bold]{title}[/bold]")
    searcher = ctx.searcher
    for query in EXAMPLE_QUERIES:
        print_results(query, searcher.search(DEMO_CORPUS, query, k=3))
        console.print()


def _print_report(report: dict[str, Any]) -> None:
    console.print(
        f"documents: {report.get('added', 0)} added, {report.get('updated', 0)} updated, "
        f"{report.get('unchanged', 0)} unchanged, {report.get('deleted', 0)} deleted; "
        f"{report.get('passages_added', 0)} passages added"
    )
