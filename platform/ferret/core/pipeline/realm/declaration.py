"""The REALM pre-training pipeline, declared once (``REALM``): pretrain → guard, both on the gpu queue.

This module is what a face reads to start a job: the stages' names, queue and resources, the launch checks
(``prepare_job``) and the stored result. The stage functions are in ``stages``, named here by ``StageBody``: they
import torch and transformers, which only a worker or a job runner needs (``tests/cli/test_startup.py`` checks
that this module imports none of it).

Example:
    >>> job = start_job(session, settings, JOB_REALM, corpus="docs", config=RealmConfig(steps=200))
    >>> run_in_process(REALM, RealmState.start(corpus, RealmConfig(steps=200), job_id=7), context)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_corpus
from ferret.core.db.model_version import find_model_version, validate_model_name
from ferret.core.db.models import Corpus
from ferret.core.db.synthetic import latest_run
from ferret.core.db.task import get_task
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.pipeline.declaration import JobLaunch, LaunchContext, Pipeline, Resource, Stage, StageBody, WorkerQueue
from ferret.core.pipeline.realm.state import JOB_REALM, RealmState, resumed_state
from ferret.core.realm.config import RealmConfig

_STAGES = "ferret.core.pipeline.realm.stages"


def _result(state: RealmState, done: Any) -> dict[str, Any]:
    summary = {key: value for key, value in state.summary.items() if key not in ("losses", "best_dir")}
    return {"model": state.model_name, "run_key": state.run_key, **summary}


def _job_id(state: RealmState) -> int | None:
    return state.job_id


def _check_task(session: Session, name: str, corpus: Corpus) -> None:
    """The guard judges on the task's evidence after the whole pre-training: a task that cannot give it is refused
    before the training starts, not hours later."""
    task = get_task(session, name)
    if task.corpus_id != corpus.id:
        raise InvalidInputError(f"Task {name!r} is a task of another corpus; give a task of corpus {corpus.name!r}.")
    if latest_run(session, task) is None:
        raise ConflictError(
            f"Task {name!r} has no generation run yet, so the guard has no evidence from it; run `ferret pipeline "
            "run` first, or leave out --task to judge on REALM's held-out sentences.",
            over_http=f"Task {name!r} has no generation run yet, so the guard has no evidence from it; start its "
            "pipeline with POST /v1/jobs first, or leave out task.",
        )


def prepare_job(
    context: LaunchContext,
    *,
    corpus: Corpus | str,
    config: RealmConfig | None = None,
    model_name: str | None = None,
    task: str | None = None,
    resume_from: int | None = None,
) -> JobLaunch:
    """REALM pre-training of ``corpus``; ``resume_from`` continues a killed REALM job from its checkpoint."""
    session = context.session
    row = get_corpus(session, corpus) if isinstance(corpus, str) else corpus
    if resume_from is not None:
        state = resumed_state(session, resume_from, row)
    else:
        if model_name is not None:
            validate_model_name(model_name)  # it names the model's folder: "../x" would write outside FERRET_HOME
        if task is not None:
            _check_task(session, task, row)
        state = RealmState.start(row, config or RealmConfig(), model_name=model_name, task=task)
        if find_model_version(session, state.model_name) is not None:
            raise ConflictError(f"Model version {state.model_name!r} already exists; choose another model name.")

    def begin(job_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        started = replace(state, job_id=job_id).to_json()
        return {"model_name": state.model_name, "resumed_from": resume_from, "state": started}, started

    return JobLaunch(row.id, begin)


REALM: Pipeline[RealmState] = Pipeline(
    kind=JOB_REALM,
    stages=(
        Stage("pretrain", StageBody(_STAGES, "pretrain_stage"), WorkerQueue.GPU, needs=frozenset({Resource.INDEX})),
        Stage("guard", StageBody(_STAGES, "guard_stage"), WorkerQueue.GPU),
    ),
    load=RealmState.from_json,
    dump=RealmState.to_json,
    job_id=_job_id,
    task_prefix="ferret.realm",
    result=_result,
    description="REALM pre-training of a corpus's retriever (no examples needed), then the promotion guard.",
    prepare=prepare_job,
)
