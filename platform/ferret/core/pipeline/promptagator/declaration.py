"""The Promptagator pipeline, declared (``PROMPTAGATOR``): generate → filter → train → guard → index → configure.

This module is what a face reads to start a job: the stages' names, queues, resources and shares, the launch checks
(``prepare_job``) and how the state is shown. The stage functions are in ``stages`` and ``configure``, named here
by ``StageBody``: they import torch and transformers, which only a worker or a job runner needs
(``tests/cli/test_startup.py`` checks that this module imports none of it).

Example:
    >>> job = start_job(session, settings, JOB_PIPELINE, task="faq", config=PipelineConfig(promote="force"))
    >>> run_in_process(PROMPTAGATOR, state, context)  # every stage here, in order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.index_version import active_index_version
from ferret.core.db.job import active_jobs
from ferret.core.db.model_version import find_model_version, get_model_version, validate_model_name
from ferret.core.db.models import Corpus, ModelVersion, RetrievalTask
from ferret.core.db.task import get_task
from ferret.core.encoder.registry import BASE_MODEL_NAME, ModelRegistry
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.pipeline.declaration import JobLaunch, LaunchContext, Pipeline, Resource, Stage, StageBody, WorkerQueue
from ferret.core.pipeline.promptagator.state import PipelineConfig, PipelineState
from ferret.core.settings import FerretSettings

JOB_PIPELINE = "pipeline"
"""The job kind of a Promptagator pipeline (the ``jobs.kind`` column)."""
ROUND_TRIP_RETRIEVERS = ("none", "bm25", "hybrid")
"""Round trips that no model version names (``PipelineConfig.round_trip``; any other value is one)."""

_STAGES = "ferret.core.pipeline.promptagator.stages"
_CONFIGURE = "ferret.core.pipeline.promptagator.configure"


def require_realm_model(model: ModelVersion, corpus: str) -> None:
    """Refuse, as ``init``, a model version that REALM did not pre-train (the train stage starts from it)."""
    if "realm" not in (model.training_config or {}):
        raise InvalidInputError(
            f"Model version {model.name!r} was not pre-trained with `ferret realm pretrain`; name one it made as "
            "realm:<model>.",
            over_http=f"Model version {model.name!r} was not pre-trained with REALM (POST /v1/corpora/{corpus}/realm); "
            "name one it made as realm:<model>.",
        )


def require_active_index(session: Session, corpus: Corpus) -> None:
    """The hybrid round trip searches the active index: checked at launch and again by the filter stage."""
    if active_index_version(session, corpus) is None:
        raise InvalidInputError(
            f"Round trip 'hybrid' searches the active index, and corpus {corpus.name!r} has none; index it first."
        )


def reference_model_name(session: Session, settings: FerretSettings, corpus: Corpus) -> str:
    """The model the guard compares against: the one behind the corpus's active index version, else the base."""
    active = active_index_version(session, corpus)
    if active is not None:
        return active.model_version.name
    ModelRegistry(session, settings).ensure_base()
    return BASE_MODEL_NAME


def progress_counts(state: PipelineState) -> dict[str, Any]:
    """What the admin shows beside the progress bar."""
    counts: dict[str, Any] = {"model": state.model_name}
    if state.run_id is not None:
        counts["generation_run"] = state.run_id
    if state.filters is not None:
        counts["queries_kept"] = state.filters.get("kept")
        counts["queries_considered"] = state.filters.get("considered")
    if state.guard is not None:
        counts["guard_passed"] = state.guard.get("passed")
    return counts


def job_result(state: PipelineState, done: Sequence[str]) -> dict[str, Any]:
    """The job's stored result: the state so far and the stages done."""
    return {**state.to_json(), "stages_done": list(done)}


def prepare_job(
    context: LaunchContext, *, task: RetrievalTask | str, config: PipelineConfig | None = None
) -> JobLaunch:
    """A pipeline job of ``task``; its model is named ``config.model_name`` or ``<task>-job<id>``."""
    session = context.session
    row = get_task(session, task) if isinstance(task, str) else task
    checked = (config or PipelineConfig()).validated()
    if checked.model_name is not None and find_model_version(session, validate_model_name(checked.model_name)):
        raise ConflictError(f"Model version {checked.model_name!r} already exists; choose another model name.")
    # What the later stages read is checked now, not after the hours of generation before them.
    for named in (checked.init_model, checked.round_trip):
        if named is not None and named not in (*ROUND_TRIP_RETRIEVERS, BASE_MODEL_NAME):
            get_model_version(session, named)  # NotFoundError naming the known versions
    if checked.init_model is not None:
        require_realm_model(get_model_version(session, checked.init_model), row.corpus.name)
    if checked.round_trip == "hybrid":
        require_active_index(session, row.corpus)
    # Two runs of one task would write the same generation run's queries (its samples are keyed by document).
    if running := active_jobs(session, JOB_PIPELINE, task=row.name):
        raise ConflictError(f"Task {row.name!r} already has pipeline job {running[0].id}; wait for it or cancel it.")

    def begin(job_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        name = checked.model_name or f"{row.name}-job{job_id}"
        state = PipelineState.start(row, checked, model_name=name, job_id=job_id)
        return {"task": row.name, "model_name": name, "config": checked.to_json()}, state.to_json()

    return JobLaunch(row.corpus_id, begin)


# Each stage's share of the job's progress: the quickstart's stage times on 2 CPU cores (generate 176 s, filter 4,
# train 41, guard 8, configure 1; benchmarks/RESULTS.md, issue 12, twentieth session), rounded, with room for the
# index build a promoted model gets. Generation dominates on a GPU too: 189 of the 267 s of SciFact's pipeline on an
# H100 (71%; benchmarks/RESULTS.md, issue 16).
PROMPTAGATOR: Pipeline[PipelineState] = Pipeline(
    kind=JOB_PIPELINE,
    stages=(
        Stage("generate", StageBody(_STAGES, "generate_stage"), WorkerQueue.LLM, frozenset({Resource.LLM}), share=70),
        # The index: round trip through a live index (the base model's, or the hybrid first stage).
        Stage("filter", StageBody(_STAGES, "filter_stage"), WorkerQueue.CPU, frozenset({Resource.INDEX}), share=2),
        Stage("train", StageBody(_STAGES, "train_stage"), WorkerQueue.GPU, share=16),
        Stage("guard", StageBody(_STAGES, "guard_stage"), WorkerQueue.GPU, share=4),
        Stage("index", StageBody(_STAGES, "index_stage"), WorkerQueue.GPU, frozenset({Resource.INDEX}), share=6),
        Stage(
            "configure", StageBody(_CONFIGURE, "configure_stage"), WorkerQueue.GPU, frozenset({Resource.INDEX}), share=2
        ),
    ),
    load=PipelineState.from_json,
    dump=PipelineState.to_json,
    job_id=lambda state: state.job_id,
    task_prefix="ferret.pipeline",
    counts=progress_counts,
    result=job_result,
    description="Promptagator: synthetic queries from a few examples, filtered, fine-tuned, guarded, indexed.",
    prepare=prepare_job,
)
"""Task names ``ferret.pipeline.<stage>``; a Celery chain llm → cpu → gpu with a broker."""
