"""The Promptagator pipeline's stage functions: generate → filter → train → guard → index (configure is in
``configure``); the pipeline is declared in ``declaration`` (``PROMPTAGATOR``), which names these by ``StageBody``
so that starting a job imports none of this module's ML stack.

Each stage function takes a ``StageContext`` (session, settings, progress and the resources its declaration lists)
and a ``PipelineState`` (ids, not rows), commits what the next stage needs and returns the state advanced. That is
what lets every stage run as its own Celery task on its own queue, and lets a stage redelivered after its worker
died simply run again:

- generate resumes its generation run (or reuses the finished one): no query is generated twice;
- filter undoes earlier drops and filters again from scratch;
- train reuses a model version that carries this pipeline's ``key`` instead of registering a second one;
- guard reuses the figures already stored beside the model version;
- index reuses a live index version of the model; a build killed half-way is marked failed and built again
  (point ids are uuid5 of the passages, so a collection never holds a point twice).

Example:
    >>> state = PipelineState.start(task, PipelineConfig(), model_name="faq-1")
    >>> context = StageContext(session, settings, llm_backend=llm, index_backend=backend)
    >>> state = run_in_process(PROMPTAGATOR, state, context)
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch
from sqlalchemy.orm import Session

from ferret.core.db.document import passage_texts_of_documents
from ferret.core.db.index_version import plain_index_versions
from ferret.core.db.model_version import find_model_version, get_model_version
from ferret.core.db.models import Corpus, ModelVersion, RetrievalTask
from ferret.core.db.synthetic import document_texts, get_run, training_pairs
from ferret.core.encoder.registry import BASE_MODEL_NAME, ModelRegistry
from ferret.core.errors import ConflictError, NotFoundError
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.declaration import (
    reference_model_name,
    require_active_index,
    require_realm_model,
)
from ferret.core.pipeline.promptagator.state import PipelineConfig, PipelineState
from ferret.core.search.searcher import Searcher
from ferret.core.synth.filters import ROUND_TRIP_MAX_K, FilterConfig, Retriever, apply_filters, length_bounds
from ferret.core.synth.generation import generate
from ferret.core.synth.retrievers import BM25Retriever, EncoderRetriever, SearcherRetriever
from ferret.core.training.config import DualEncoderTrainingConfig
from ferret.core.training.dual_encoder_trainer import train_dual_encoder
from ferret.core.training.guard import run_guard
from ferret.core.training.guard_evidence import guard_evidence, passage_texts, split_held_out
from ferret.core.training.hard_negatives import bm25_hard_negatives, bm25_residual_negatives
from ferret.core.training.positives import passage_positives


def should_promote(state: PipelineState) -> bool:
    """``force`` always; ``auto`` only when the guard measured a gain; ``never`` never."""
    passed = bool(state.guard and state.guard.get("passed"))
    return state.config.promote == "force" or (state.config.promote == "auto" and passed)


def _task(session: Session, state: PipelineState) -> RetrievalTask:
    task = session.get(RetrievalTask, state.task_id)
    if task is None:
        raise NotFoundError(f"Task {state.task!r} was deleted while its pipeline was running.")
    return task


def _document_passages(session: Session, corpus: Corpus) -> dict[int, str]:
    return passage_texts(document_texts(session, corpus))


def generate_stage(context: StageContext, state: PipelineState) -> PipelineState:
    """Synthetic queries for the task's documents (resumed, or reused when the same settings already ran)."""
    started = time.perf_counter()
    config = state.config
    session = context.session
    run = generate(
        session,
        _task(session, state),
        context.llm,
        queries_per_doc=config.queries_per_doc,
        max_documents=config.max_documents,
        reuse_finished=True,  # a re-run (other training settings) reuses the queries it already paid for
        progress=context.progress,
    )
    return state.advance("generate", time.perf_counter() - started, run_id=run.id)


def filter_stage(context: StageContext, state: PipelineState) -> PipelineState:
    """Length, copy, duplicate and round-trip filters over the run, from scratch (earlier drops are undone)."""
    started = time.perf_counter()
    session, status = context.session, context.progress
    if state.run_id is None:
        raise ValueError("the filter stage needs the generation run of the generate stage")
    config = state.config
    task = _task(session, state)
    run = get_run(session, state.run_id)
    status("filtering", 0.0)
    round_trip = _round_trip_retriever(context, task.corpus, config)
    basic: dict[str, Any] = (
        length_bounds(task)
        if config.basic_filters
        else {"min_words": 0, "max_words": 10**6, "drop_copies": False, "dedupe": False}
    )
    report = apply_filters(
        session,
        run,
        FilterConfig(
            round_trip=round_trip, round_trip_k=config.round_trip_k, best_of_n=config.best_of_n,
            logprob_quantile=config.logprob_quantile, **basic,
        ),
    )  # fmt: skip
    session.commit()
    status("filtering", 1.0)
    return state.advance("filter", time.perf_counter() - started, filters=report.as_dict())


def _round_trip_retriever(context: StageContext, corpus: Corpus, config: PipelineConfig) -> Retriever | None:
    """The round-trip filter's retriever. A model's live index of the corpus is searched rather than the corpus
    embedded again (the same MaxP ranking, up to HNSW's approximation; the quickstart's base index serves it)."""
    session, settings = context.session, context.settings
    if config.round_trip == "none":
        return None
    if config.round_trip == "bm25":
        return BM25Retriever.for_corpus(session, corpus)
    if config.round_trip == "hybrid":
        require_active_index(session, corpus)
        searcher = Searcher.over(session, settings, context.backend)
        return SearcherRetriever(searcher, corpus.name, mode="hybrid", depth=_round_trip_depth(config))
    registry = ModelRegistry(session, settings)
    model = registry.ensure_base() if config.round_trip == BASE_MODEL_NAME else registry.get(config.round_trip)
    if context.index_backend is not None:
        live = plain_index_versions(session, corpus, model)
        if live:
            searcher = Searcher.over(session, settings, context.backend)
            index = max(live, key=lambda v: v.version)
            depth = _round_trip_depth(config)
            return SearcherRetriever(searcher, corpus.name, mode="dense", depth=depth, index_version=index)
    return EncoderRetriever.for_corpus(session, corpus, registry.encoder(model))


def _round_trip_depth(config: PipelineConfig) -> int:
    """How deep the round-trip retriever ranks: the given K, or deep enough to derive K from the examples."""
    return config.round_trip_k if config.round_trip_k is not None else ROUND_TRIP_MAX_K


def _own_model(session: Session, state: PipelineState) -> ModelVersion | None:
    """The model version this pipeline already registered (a redelivered train stage), else None.

    Raises ``ConflictError`` when the name is taken by another model: training would overwrite its files.
    """
    model = find_model_version(session, state.model_name)
    if model is None:
        return None
    if (model.training_config or {}).get("pipeline_key") != state.key:
        raise ConflictError(f"Model version {state.model_name!r} already exists; choose another model name.")
    return model


def train_stage(context: StageContext, state: PipelineState) -> PipelineState:
    """Fine-tune the base dual encoder on the filtered pairs (held-out documents left out) and register it."""
    started = time.perf_counter()
    session, settings, status = context.session, context.settings, context.progress
    if state.run_id is None:
        raise ValueError("the train stage needs the generation run of the generate stage")
    task = _task(session, state)
    reference = state.reference_model or reference_model_name(session, settings, task.corpus)
    session.commit()  # the base row, if new: nothing stays locked while training runs
    if _own_model(session, state) is not None:
        return state.advance("train", time.perf_counter() - started, reference_model=reference)

    config = state.config
    registry = ModelRegistry(session, settings)
    base = registry.ensure_base()
    if config.init_model is not None:  # start from a REALM-pre-trained retriever
        base = registry.get(config.init_model)
        require_realm_model(base, task.corpus.name)
    run = get_run(session, state.run_id)
    train, held_out = split_held_out(training_pairs(session, run), config.held_out_fraction, config.seed)
    texts = _document_passages(session, task.corpus)
    overrides: dict[str, Any] = {
        "max_seq_length": task.corpus.max_passage_tokens + 2,  # the served passages, and [CLS] and [SEP]
        "learning_rate": config.learning_rate,
        "base_weight": config.base_weight,
        "hard_negatives": config.hard_negatives,
        "cropping_warmup_steps": config.cropping_warmup_steps,
    }
    overrides.update({k: v for k, v in (("max_steps", config.max_steps), ("batch_size", config.batch_size)) if v})
    training = DualEncoderTrainingConfig.scaled(
        len(train),
        gpu=torch.cuda.is_available(),
        base_model=base.path,
        output_dir=str(registry.model_dir(state.model_name)),
        seed=config.seed,
        device=settings.device,
        **overrides,
    )
    negatives, lexical_gaps = None, None
    if config.hard_negatives == "bm25":
        status("mining BM25 hard negatives", 0.0)
        negatives = bm25_hard_negatives(BM25Retriever.for_corpus(session, task.corpus), train, texts, seed=config.seed)
    elif config.hard_negatives == "residual":
        status("mining BM25 hard negatives", 0.0)
        mined = bm25_residual_negatives(
            BM25Retriever.for_corpus(session, task.corpus).scores, train, texts, seed=config.seed
        )
        negatives, lexical_gaps = [text for text, _ in mined], [gap for _, gap in mined]
    served = passage_texts_of_documents(session, sorted({doc_id for _, doc_id in train}))
    positives = passage_positives([query for query, _ in train], [served.get(d) or [texts[d]] for _, d in train])
    session.commit()  # end the read transaction: training takes minutes
    path = train_dual_encoder(
        training,
        [query for query, _ in train],
        positives,
        negatives=negatives,
        lexical_gaps=lexical_gaps,
        corpus=list(texts.values()) if config.cropping_warmup_steps else None,
        progress=status,
    )
    model = registry.register(state.model_name, path, parent=base)
    model.training_config = {
        "training": training.to_json(),
        "pipeline": config.to_json(),
        "pipeline_key": state.key,
        "job": state.job_id,
        "task": task.name,
        "generation_run": run.id,
        "filters": dict(state.filters or {}),
        "pairs": {"train": len(train), "held_out": len(held_out)},
    }
    session.commit()
    return state.advance("train", time.perf_counter() - started, reference_model=reference)


def guard_stage(context: StageContext, state: PipelineState) -> PipelineState:
    """Compare the candidate with the reference model on held-out and example queries; store the figures."""
    started = time.perf_counter()
    session, settings, status = context.session, context.settings, context.progress
    if state.run_id is None:
        raise ValueError("the guard stage needs the generation run of the generate stage")
    model = get_model_version(session, state.model_name)
    stored = model.metrics.get("guard")
    if stored is not None:  # a redelivery: the guard already ran for this model
        return state.advance("guard", time.perf_counter() - started, guard=dict(stored))
    status("guard: comparing with the active model", 0.0)
    config = state.config
    task = _task(session, state)
    registry = ModelRegistry(session, settings)
    reference = registry.get(state.reference_model or BASE_MODEL_NAME)
    evidence = guard_evidence(
        session, task, get_run(session, state.run_id), held_out_fraction=config.held_out_fraction, seed=config.seed
    )
    guard = run_guard(registry.encoder(model), registry.encoder(reference), evidence)
    model.metrics = {"guard": guard.as_dict(), "reference_model": reference.name}
    session.commit()
    status("guard: comparing with the active model", 1.0)
    return state.advance("guard", time.perf_counter() - started, guard=guard.as_dict())


def index_stage(context: StageContext, state: PipelineState) -> PipelineState:
    """Build the model's index version when it is to be promoted (or with ``never``, to compare), then promote."""
    started = time.perf_counter()
    promote = should_promote(state)
    if not promote and state.config.promote != "never":
        return replace(state, promoted=False)  # nothing built: no index seconds, as before the split
    session = context.session
    model = get_model_version(session, state.model_name)
    versions = VersionedCollection(session, context.settings, context.backend, _task(session, state).corpus)
    index_version = versions.publish(
        model,
        reuse=versions.live_version(model),  # a redelivery finds its finished build
        promote=promote,
        progress=context.progress,
    )
    return state.advance("index", time.perf_counter() - started, promoted=promote, index_version_id=index_version.id)
