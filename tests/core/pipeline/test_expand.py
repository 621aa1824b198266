"""The configuration stage's expansion step (doc2query--) on a real corpus, embedded index and SQLite: which queries
expand which documents, the expanded version that only its configuration searches, the guard's decision, a
redelivery, and a configuration whose expanded index is gone."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.index_version import active_index_version, live_index_versions, plain_index_versions
from ferret.core.db.models import Corpus, IndexState, QueryStatus, SyntheticQuery
from ferret.core.db.search_config import create_search_config, list_search_configs
from ferret.core.db.synthetic import create_run
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.types import point_id
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.expand import expand_candidate, expansion_texts
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.search.configuration import (
    SearchPlan,
    base_plan,
    create_config,
    describe,
    plan_for,
    read_active_plan,
    retriever_label,
)
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import Evidence
from ferret.core.settings import FerretSettings
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task
from ferret.core.training.guard import LabelledQuery

# (document, sample, query, status): words none of the documents has, so BM25 finds them only where appended
QUERIES = [
    ("d4", 0, "barista crema", QueryStatus.OK),
    ("d4", 1, "barista crema", QueryStatus.OK),  # the same query twice is appended once
    ("d6", 0, "grandmaster tournament", QueryStatus.OK),
    ("d9", 0, "sourdough leaven", QueryStatus.DROPPED),  # a filter dropped it: not appended
    ("d8", 0, "lunar pull", QueryStatus.OK),  # a held-out document: never appended
]
HELD_OUT = "d8"


def test_expansion_is_part_of_the_configuration_stage() -> None:
    with pytest.raises(InvalidInputError, match="Expansion is part of the configuration stage"):
        PipelineConfig(expand=True, configure=False).validated()
    assert PipelineConfig(expand=True).validated().expand


def test_the_kept_queries_of_training_documents_expand_them_and_only_their_configuration_searches_it(
    settings: FerretSettings, session: Session, corpus: Corpus
) -> None:
    backend = EdgeIndexBackend(settings.qdrant_path)
    base = ModelRegistry(session, settings).ensure_base()
    versions = VersionedCollection(session, settings, backend, corpus)
    plain = versions.build(base)
    versions.promote(plain)
    task = create_task(session, TaskSpec(name="facts-task", corpus="facts", examples=[
        ExampleSpec(query="capital of France", document="d1"), ExampleSpec(query="coffee", document="d4"),
    ]))  # fmt: skip
    run = create_run(session, task, {})
    ids = {d.external_id: d.id for d in corpus.documents}
    for external, sample, text, status in QUERIES:
        session.add(SyntheticQuery(run_id=run.id, document_id=ids[external], sample=sample, text=text, status=status))
    session.commit()
    held_out = lambda document_id: document_id == ids[HELD_OUT]  # noqa: E731

    queries = list(session.scalars(select(SyntheticQuery).where(SyntheticQuery.run_id == run.id)))
    assert expansion_texts(queries, held_out) == {ids["d4"]: ["barista crema"], ids["d6"]: ["grandmaster tournament"]}
    assert expansion_texts(queries, lambda _: True) == {}

    context = StageContext(session, settings, index_backend=backend)
    searcher = Searcher.over(session, settings, backend)
    # the evidence reads d1 and d4 (the task's examples): their documents are not expanded, d4's kept query neither
    evidence = Evidence([LabelledQuery("capital of France", ids["d1"]), LabelledQuery("coffee", ids["d4"])], [])
    candidate = base_plan(session, corpus)

    def expand() -> tuple[int, dict[str, object]]:
        found = expand_candidate(
            context, corpus, run, searcher, retriever=base, candidate=candidate, candidate_examples=(),
            tuning=evidence, guarding=evidence, held_out=held_out, key="job-1",
        )  # fmt: skip
        assert found.plan.collection == found.index.collection != plain.collection
        return found.index.id, found.evidence

    index_id, outcome = expand()
    assert outcome["documents"] == 1 and outcome["queries"] == 1 and outcome["run"] == run.id
    # two labelled queries are no evidence: the guard refuses, and nothing was promoted
    assert outcome["kept"] is False and "held-out queries" in str(outcome["guard"])
    expanded = next(v for v in live_index_versions(session, corpus) if v.id == index_id)
    assert expanded.state == IndexState.READY and expanded.expansion is not None
    assert expanded.expansion["key"] == "job-1" and expanded.point_count == plain.point_count
    assert active_index_version(session, corpus) == plain
    # only the sparse vectors differ: the dense ones were read from the plain version
    points = [point_id(corpus.id, p.id) for d in corpus.documents for p in d.passages]
    stored, copied = backend.dense_vectors(plain.collection, points), backend.dense_vectors(expanded.collection, points)
    assert len(points) == 10 and stored == copied
    # a model's own search (a configuration naming only the model, `index build` reuse) never finds the expanded one
    assert plain_index_versions(session, corpus, base) == [plain] and versions.live_version(base) == plain

    def bm25(query: str, index_version: object) -> list[str]:
        hits = searcher.search("facts", query, mode="sparse", index_version=index_version)  # type: ignore[arg-type]
        return [hit.external_id for hit in hits]

    assert bm25("grandmaster", expanded) == ["d6"] and bm25("grandmaster", plain) == []
    assert bm25("crema", expanded) == []  # an example's document
    assert bm25("sourdough", expanded) == [] and bm25("lunar", expanded) == []
    # the text search returns is the passage's own
    assert "grandmaster" not in searcher.search("facts", "grandmaster", mode="sparse", index_version=expanded)[0].text

    # a redelivered stage finds its version by the pipeline's key instead of building another
    again, _ = expand()
    assert again == index_id
    assert sum(v.expansion is not None for v in live_index_versions(session, corpus)) == 1

    config = create_search_config(session, corpus, base, {"method": "rrf"}, index_version=expanded)
    session.commit()
    assert plan_for(session, corpus, config).collection == expanded.collection
    shown = describe(config)
    assert shown["index_version"] == expanded.version and retriever_label(shown).endswith(
        f"+ expansion (1 queries, index v{expanded.version})"
    )
    assert bm25("grandmaster", None) == []  # plain search still reads the active, plain index

    # an admin names it by hand; a version that does not exist is refused, and nothing is stored
    by_hand = create_config(session, corpus, index_version=expanded.version, note="by hand")
    assert by_hand.index_version_id == expanded.id
    assert create_config(session, corpus, index_version=plain.version).index_version_id is None  # the model's own
    with pytest.raises(NotFoundError, match="Corpus 'facts' has no index version 99"):
        create_config(session, corpus, index_version=99)
    assert [c.note for c in list_search_configs(session, corpus)].count("by hand") == 1

    # the expanded version retired: the configuration says so in one sentence, and searches fall back to the plain one
    expanded.state = IndexState.RETIRED
    config.active = True
    session.commit()
    with pytest.raises(ConflictError, match=rf"searches index version {expanded.version}, which is retired"):
        plan_for(session, corpus, config)
    fallback = read_active_plan(session, "facts")
    assert fallback is not None and fallback.collection == plain.collection and fallback.label == "degraded"
    count = len(list_search_configs(session, corpus))
    with pytest.raises(ConflictError, match="which is retired"):
        create_config(session, corpus, index_version=expanded.version)
    assert len(list_search_configs(session, corpus)) == count
    backend.close()


def test_a_run_that_kept_no_training_query_expands_nothing(
    settings: FerretSettings, session: Session, corpus: Corpus
) -> None:
    backend = EdgeIndexBackend(settings.qdrant_path)
    base = ModelRegistry(session, settings).ensure_base()
    task = create_task(session, TaskSpec(name="facts-task", corpus="facts", zero_shot=True))
    run = create_run(session, task, {})
    session.add(SyntheticQuery(run_id=run.id, document_id=corpus.documents[0].id, sample=0, text="q",
                               status=QueryStatus.DROPPED))  # fmt: skip
    session.commit()
    with pytest.raises(InvalidInputError, match=f"Run {run.id} kept no synthetic query of a training document"):
        expand_candidate(
            StageContext(session, settings, index_backend=backend), corpus, run,
            Searcher.over(session, settings, backend), retriever=base, candidate=SearchPlan("facts__v1", base.path),
            candidate_examples=(), tuning=Evidence([], []), guarding=Evidence([], []), held_out=lambda _: False,
            key="job-2",
        )  # fmt: skip
    assert live_index_versions(session, corpus) == [] and backend.list_collections() == []  # nothing was built
    backend.close()
