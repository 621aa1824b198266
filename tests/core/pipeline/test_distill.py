"""The configuration stage's distillation step (GPL) on a real corpus, index and SQLite: which queries teach, the
student's version and index, the guard's decision, a redelivery, and the setting's own checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.index_version import active_index_version, live_index_versions
from ferret.core.db.models import Corpus, IndexVersion, ModelVersion, QueryStatus, SyntheticQuery
from ferret.core.db.synthetic import create_run
from ferret.core.encoder.registry import ModelRegistry, base_model_path
from ferret.core.errors import InvalidInputError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.distill import clean_pairs, distill_candidate
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.rerank.cross_encoder import load_reranker
from ferret.core.rerank.stage import register_reranker
from ferret.core.search.configuration import DEFAULT_RERANK_DEPTH, base_plan
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import Evidence
from ferret.core.settings import FerretSettings
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task
from ferret.core.training.distillation import DistillationConfig
from ferret.core.training.guard import LabelledQuery

# (document, sample, query, status, reason): usable queries, one the round trip dropped (it still teaches: the
# teacher's margin is its label), a copy of an example and a run-on (they do not), and a held-out document's.
QUERIES = [
    ("d1", 0, "capital city on the seine", QueryStatus.OK, None),
    ("d1", 1, "largest french city", QueryStatus.DROPPED, "round-trip: not in top 3"),
    ("d1", 2, "capital of France", QueryStatus.DROPPED, "copy of an example query"),
    ("d3", 0, "biggest planet with a red spot", QueryStatus.OK, None),
    ("d4", 0, "how espresso is brewed", QueryStatus.OK, None),
    ("d5", 0, "why volcanoes erupt", QueryStatus.OK, None),
    ("d8", 0, "what pulls the tides", QueryStatus.OK, None),
    ("d9", 0, "why dough rises", QueryStatus.OK, None),
    ("d10", 0, "how glaciers carve valleys", QueryStatus.FAILED, "run-on"),
]
HELD_OUT = "d8"


def test_distillation_needs_its_teacher_and_the_configuration_stage() -> None:
    with pytest.raises(InvalidInputError, match=r"Distillation needs the reranker \(--reranker\): it is the teacher"):
        PipelineConfig(distill=True).validated()
    with pytest.raises(InvalidInputError, match="cannot run with configure off"):
        PipelineConfig(distill=True, reranker=True, configure=False).validated()
    assert PipelineConfig(distill=True, reranker=True).validated().distill


@pytest.mark.slow
def test_a_kept_reranker_teaches_a_student_that_the_guard_judges(
    settings: FerretSettings, session: Session, corpus: Corpus, tmp_path: Path
) -> None:
    from sentence_transformers import CrossEncoder

    settings = settings.model_copy(update={"reranker_runtime": "torch"})
    backend = EdgeIndexBackend(settings.qdrant_path)
    base = ModelRegistry(session, settings).ensure_base()
    versions = VersionedCollection(session, settings, backend, corpus)
    versions.promote(versions.build(base))
    examples = [ExampleSpec(query="capital of France", document="d1"), ExampleSpec(query="coffee", document="d4")]
    task = create_task(session, TaskSpec(name="facts-task", corpus="facts", examples=examples))
    run = create_run(session, task, {})
    ids = {d.external_id: d.id for d in corpus.documents}
    for external, sample, text, status, reason in QUERIES:
        session.add(SyntheticQuery(run_id=run.id, document_id=ids[external], sample=sample, text=text, status=status,
                                   reason=reason))  # fmt: skip
    session.commit()
    held_out = lambda document_id: document_id == ids[HELD_OUT]  # noqa: E731

    queries = list(session.scalars(select(SyntheticQuery).where(SyntheticQuery.run_id == run.id)))
    assert sorted(clean_pairs(queries, held_out)) == sorted([
        ("capital city on the seine", ids["d1"]), ("largest french city", ids["d1"]),
        ("biggest planet with a red spot", ids["d3"]), ("how espresso is brewed", ids["d4"]),
        ("why volcanoes erupt", ids["d5"]), ("why dough rises", ids["d9"]),
    ])  # fmt: skip

    CrossEncoder(str(base_model_path()), num_labels=1, device="cpu").save(str(tmp_path / "teacher"))
    teacher = register_reranker(session, "facts-reranker", tmp_path / "teacher", training={})
    session.commit()
    scorer = load_reranker(teacher.path, name=teacher.name, settings=settings)
    first_stage = base_plan(session, corpus)
    candidate = replace(first_stage, reranker=scorer, rerank_depth=DEFAULT_RERANK_DEPTH)
    labelled = [LabelledQuery("capital of France", ids["d1"]), LabelledQuery("coffee", ids["d4"])]
    evidence = Evidence(labelled, [LabelledQuery("what pulls the tides", ids["d8"])])
    context = StageContext(session, settings, index_backend=backend)
    searcher = Searcher.over(session, settings, backend)

    def distil() -> tuple[ModelVersion, dict[str, Any]]:
        found = distill_candidate(
            context, corpus, run, searcher, teacher=teacher, scorer=scorer, retriever=base, first_stage=first_stage,
            candidate=candidate, candidate_examples=(), tuning=evidence, guarding=evidence, held_out=held_out,
            name="facts-distilled", seed=13, distillation=DistillationConfig(epochs=1, batch_size=4), minimum_pairs=1,
        )  # fmt: skip
        assert found.plan.reranker is scorer and found.plan.label == "facts-distilled"
        return found.model, found.evidence

    student, outcome = distil()

    assert student.kind == "dual_encoder" and student.parent_id == base.id
    assert student.training_config is not None and student.training_config["teacher"] == "facts-reranker"
    assert student.training_config["objective"] == "margin-mse" and student.training_config["epochs"] == 1
    assert outcome["groups"] == 6 and outcome["student"] == "facts-distilled"
    # one held-out query is no evidence: the student is refused, and the active index is still the base model's
    assert outcome["kept"] is False and "held-out queries" in outcome["guard"]["reason"]
    assert [v.model_version_id for v in live_index_versions(session, corpus)].count(student.id) == 1
    active = active_index_version(session, corpus)
    assert active is not None and active.model_version_id == base.id

    # a redelivered stage reuses the student and its index instead of training and building them again
    again, _ = distil()
    assert again.id == student.id
    assert session.scalar(select(func.count(ModelVersion.id)).where(ModelVersion.name == "facts-distilled")) == 1
    assert session.scalar(select(func.count(IndexVersion.id)).where(IndexVersion.model_version_id == student.id)) == 1
    backend.close()
