"""REALM's pipeline declaration: listed once in the job catalogue, its stages on the gpu queue, its state as JSON,
resume rules; and ``--init realm:<model>`` for Promptagator."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_or_create_corpus
from ferret.core.db.job import create_job, finish_job
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.jobs.catalog import JOB_KINDS, pipeline_of
from ferret.core.pipeline.declaration import Resource, WorkerQueue
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.pipeline.realm.declaration import REALM
from ferret.core.pipeline.realm.state import JOB_REALM, RealmState, resumed_state
from ferret.core.realm.config import RealmConfig


def test_realm_is_one_declared_pipeline() -> None:
    assert pipeline_of(JOB_REALM) is REALM and JOB_KINDS[JOB_REALM] is REALM
    assert REALM.stage_names == ("pretrain", "guard")
    assert [s.task for s in REALM.stages] == ["ferret.realm.pretrain", "ferret.realm.guard"]
    assert {s.queue for s in REALM.stages} == {WorkerQueue.GPU}
    assert Resource.INDEX in REALM.stage("pretrain").needs


def test_state_travels_as_json_and_resume_keeps_the_run_key(session: Session) -> None:
    corpus = get_or_create_corpus(session, "docs")
    state = RealmState.start(corpus, RealmConfig(steps=7, k=2), job_id=3)
    assert RealmState.from_json(state.to_json()) == state and state.model_name.startswith("realm-docs-")
    job = create_job(session, JOB_REALM, corpus_id=corpus.id, params={"state": state.to_json()})
    session.commit()
    resumed = resumed_state(session, job.id, corpus)
    assert (resumed.run_key, resumed.model_name, resumed.config.steps) == (state.run_key, state.model_name, 7)
    finish_job(session, job.id, {})
    with pytest.raises(ConflictError, match="already finished"):
        resumed_state(session, job.id, corpus)
    other = create_job(session, "ingest", corpus_id=corpus.id)
    with pytest.raises(InvalidInputError, match="not a REALM pre-training job"):
        resumed_state(session, other.id, corpus)


def test_init_names_a_realm_model() -> None:
    assert PipelineConfig(init="realm:realm-docs-1").validated().init_model == "realm-docs-1"
    assert PipelineConfig().init_model is None
    for bad in ("realm-docs-1", "realm:", "base:x"):
        with pytest.raises(InvalidInputError, match="--init must be realm:<model version>"):
            PipelineConfig(init=bad).validated()
    with pytest.raises(InvalidInputError, match="Unknown REALM settings: colour"):
        RealmConfig.from_json({"colour": "red"})
