"""The Promptagator pipeline end to end on a tiny corpus: generation (scripted LLM), filters, real fine-tuning,
the guard, and promotion through a real embedded index."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.index_version import active_index_version, list_index_versions
from ferret.core.db.models import Corpus, IndexState
from ferret.core.db.search_config import active_search_config
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.pipeline.promptagator.in_process import PipelineConfig, run_pipeline
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task

QUESTIONS = ["what is {t}", "tell me about {t}", "{t} explained", "facts about {t}"]


@pytest.mark.slow
def test_guard_decides_and_force_promotes(
    settings: FerretSettings, session: Session, corpus: Corpus, scripted: type, prompted_document: Callable[[str], str]
) -> None:
    task = create_task(
        session,
        TaskSpec(
            name="facts-task",
            corpus="facts",
            examples=[
                ExampleSpec(query="capital of France", document="d1"),
                ExampleSpec(query="why bread rises", document="d9"),
            ],
        ),
    )
    session.commit()
    # A plausible query per sample, built from the document's first words.
    llm = scripted(lambda prompt, i: QUESTIONS[i % 4].format(t=" ".join(prompted_document(prompt).split()[:3]).lower()))
    backend = EdgeIndexBackend(settings.qdrant_path)
    config = PipelineConfig(queries_per_doc=4, round_trip="bm25", round_trip_k=3, held_out_fraction=0.3, max_steps=6)

    refused = run_pipeline(session, settings, backend, task, llm, config)

    assert refused.run.state.value == "succeeded"
    assert refused.filters.kept > 0
    assert (
        refused.model.training_config is not None and refused.model.training_config["generation_run"] == refused.run.id
    )
    # Trained at the length it is served at: the corpus's passages, with [CLS] and [SEP].
    assert refused.model.training_config["training"]["max_seq_length"] == corpus.max_passage_tokens + 2
    assert refused.model.metrics["guard"]["passed"] is refused.guard.passed
    # A handful of held-out queries is too little evidence: the guard refuses, nothing is built or promoted.
    assert not refused.guard.passed and "held-out queries" in refused.guard.reason
    assert refused.index_version is None and not refused.promoted
    assert active_index_version(session, corpus) is None

    # the reranker (and so its distillation) asks for more kept pairs than this run has: both say why, nothing else;
    # the expansion is built, and the guard cannot tell it from the plain index on this little evidence
    forced_config = PipelineConfig(
        **{**config.to_json(), "promote": "force", "reranker": True, "distill": True, "expand": True}
    )
    forced = run_pipeline(session, settings, backend, task, llm, forced_config)

    assert forced.run.id == refused.run.id  # generation was done: the run is reused, nothing regenerated
    assert len(llm.calls) == len({c["prompts"][0] for c in llm.calls})
    assert forced.promoted and forced.index_version is not None
    assert forced.search_config is not None
    refused_reranker = forced.search_config["reranker"]["refused"]
    assert re.fullmatch(r"Only \d+ kept synthetic pairs; a reranker needs at least 200 \(.+\)\.", refused_reranker)
    assert forced.search_config["distillation"] == {"skipped": "no reranker was kept, so none can teach the retriever"}
    expansion = forced.search_config["expansion"]
    assert expansion["kept"] is False and expansion["queries"] > 0
    assert "held-out queries" in expansion["guard"]["reason"]
    expanded = next(v for v in list_index_versions(session, corpus) if v.version == expansion["index_version"])
    assert expanded.expansion is not None and expanded.expansion["run"] == forced.run.id
    assert expanded.state == IndexState.READY  # built, not promoted: the configuration searches the plain index
    stored = active_search_config(session, corpus)
    assert stored is not None and stored.index_version_id is None
    assert forced.index_version.state == IndexState.ACTIVE
    assert backend.resolve_alias("facts") == forced.index_version.collection
    hits = Searcher.over(session, settings, backend).search("facts", "which planet has a great red spot", k=1)
    assert hits[0].external_id == "d3"


def test_length_filter_follows_the_task_examples() -> None:
    from ferret.core.db.models import RetrievalTask, TaskExample
    from ferret.core.synth.filters import length_bounds

    keywords = RetrievalTask(examples=[TaskExample(query="kidney"), TaskExample(query="breast cancer")])
    questions = RetrievalTask(examples=[TaskExample(query=" ".join(["word"] * n)) for n in (6, 10, 30)])
    assert length_bounds(keywords) == {"min_words": 1, "max_words": 40}  # one-word queries survive
    assert length_bounds(questions) == {"min_words": 3, "max_words": 60}
    assert length_bounds(RetrievalTask(examples=[])) == {}  # zero-shot: the filter's defaults


@pytest.mark.slow
def test_round_trip_reads_live_indexes_instead_of_embedding_the_corpus_again(
    settings: FerretSettings, session: Session, corpus: Corpus
) -> None:
    """``base`` searches the base model's live index (same ranking as embedding the corpus anew), ``hybrid`` the
    search that runs now; ``hybrid`` before anything is indexed is one clear error."""
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.errors import InvalidInputError
    from ferret.core.index.versioned_collection import VersionedCollection
    from ferret.core.pipeline.declaration import StageContext
    from ferret.core.pipeline.promptagator.stages import _round_trip_retriever
    from ferret.core.synth.retrievers import EncoderRetriever, SearcherRetriever

    backend = EdgeIndexBackend(settings.qdrant_path)
    context = StageContext(session, settings, index_backend=backend)
    hybrid = PipelineConfig(round_trip="hybrid", round_trip_k=3)
    with pytest.raises(InvalidInputError, match="has none; index it first"):
        _round_trip_retriever(context, corpus, hybrid)
    fresh = _round_trip_retriever(context, corpus, PipelineConfig(round_trip="base", round_trip_k=3))
    assert isinstance(fresh, EncoderRetriever)  # no index yet: the corpus is embedded

    registry = ModelRegistry(session, settings)
    versions = VersionedCollection(session, settings, backend, corpus)
    versions.promote(versions.build(registry.ensure_base()))
    from_index = _round_trip_retriever(context, corpus, PipelineConfig(round_trip="base", round_trip_k=3))
    first_stage = _round_trip_retriever(context, corpus, hybrid)

    assert isinstance(from_index, SearcherRetriever) and from_index.mode == "dense"
    assert isinstance(first_stage, SearcherRetriever) and first_stage.mode == "hybrid"
    queries = ["which planet is the biggest", "how do birds that cannot fly swim", "yeast bread dough"]
    assert from_index(queries) == [ranking[:3] for ranking in fresh(queries)]  # it searches the top K only
    assert all(len(ranking) == 3 for ranking in first_stage(queries))
