"""The Promptagator pipeline for one task in this process: generate → filter → train → guard → index → promote.

``run_pipeline`` runs the declared stages (``ferret.core.pipeline.promptagator.declaration.PROMPTAGATOR``) one after the
other in this process, with the LLM and index backend the caller holds; the job runner and the workers run the very
same declaration, stage by stage. Every stage is resumable
or idempotent on its own (generation resumes its run, filters are re-applied from scratch, training reuses the
model version it registered, index builds are versioned), so a failed pipeline is simply run again.
Promotion is ``auto`` by default: only when the guard measures a gain over the active model (``training.guard``).

Example:
    >>> result = run_pipeline(session, settings, index_backend, task, llm, PipelineConfig(max_documents=200))
    >>> result.guard.passed, result.promoted
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.model_version import find_model_version, get_model_version
from ferret.core.db.models import GenerationRun, IndexVersion, ModelVersion, RetrievalTask
from ferret.core.db.synthetic import get_run
from ferret.core.errors import ConflictError
from ferret.core.index.backend import IndexBackend
from ferret.core.llm.base import LLMBackend
from ferret.core.pipeline.declaration import StageContext, run_in_process
from ferret.core.pipeline.promptagator.declaration import PROMPTAGATOR, reference_model_name
from ferret.core.pipeline.promptagator.state import PipelineConfig, PipelineState
from ferret.core.progress import Progress, quiet
from ferret.core.settings import FerretSettings
from ferret.core.synth.filters import FilterReport
from ferret.core.training.guard import GuardReport

__all__ = ["PipelineConfig", "PipelineResult", "pipeline_result", "run_pipeline"]


@dataclass
class PipelineResult:
    run: GenerationRun
    filters: FilterReport
    model: ModelVersion
    guard: GuardReport
    index_version: IndexVersion | None
    promoted: bool
    seconds: dict[str, float] = field(default_factory=dict)
    search_config: dict[str, Any] | None = None
    """The configuration stage's outcome (``configure.configure_stage``)."""


def pipeline_result(session: Session, state: PipelineState) -> PipelineResult:
    """The rows and reports of a finished pipeline, loaded from the ids of its state."""
    if state.run_id is None or state.filters is None or state.guard is None:
        raise ValueError("the pipeline has not run all its stages")
    index_version = session.get(IndexVersion, state.index_version_id) if state.index_version_id is not None else None
    return PipelineResult(
        run=get_run(session, state.run_id),
        filters=FilterReport(**state.filters),
        model=get_model_version(session, state.model_name),
        guard=GuardReport.from_dict(state.guard),
        index_version=index_version,
        promoted=state.promoted,
        seconds=dict(state.seconds),
        search_config=state.search_config,
    )


def run_pipeline(
    session: Session,
    settings: FerretSettings,
    index_backend: IndexBackend,
    task: RetrievalTask,
    llm: LLMBackend,
    config: PipelineConfig = PipelineConfig(),
    *,
    status: Progress = quiet,
) -> PipelineResult:
    """All stages in this process, in order (``ferret pipeline run``, the quickstart, the benchmarks)."""
    name = config.model_name or f"{task.name}-{int(time.time())}"
    if find_model_version(session, name) is not None:
        raise ConflictError(f"Model version {name!r} already exists; choose another --model-name.")
    reference = reference_model_name(session, settings, task.corpus)
    state = PipelineState.start(task, config, model_name=name, reference_model=reference)
    context = StageContext(session, settings, status, llm_backend=llm, index_backend=index_backend)
    return pipeline_result(session, run_in_process(PROMPTAGATOR, state, context))
