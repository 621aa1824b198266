"""The stages of the Promptagator pipeline, each runnable on its own: generate → filter → train → guard → index.

Each stage takes a ``PipelineState`` (ids, not rows), commits what the next stage needs and returns the state
advanced. That is what lets every stage run as its own Celery task on its own queue, and lets a stage redelivered
after its worker died simply run again:

- generate resumes its generation run (or reuses the finished one): no query is generated twice;
- filter undoes earlier drops and filters again from scratch;
- train reuses a model version that carries this pipeline's ``key`` instead of registering a second one;
- guard reuses the figures already stored beside the model version;
- index reuses a live index version of the model; a build killed half-way is marked failed and built again
  (point ids are uuid5 of the passages, so a collection never holds a point twice).

Example:
    >>> state = PipelineState.start(task, PipelineConfig(), model_name="faq-1")
    >>> state = generate_stage(session, state, llm)
    >>> state = filter_stage(session, settings, state)
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.index_version import LIVE_STATES, active_index_version, list_index_versions
from ferret.core.db.model_version import find_model_version, get_model_version
from ferret.core.db.models import Corpus, GenerationRun, IndexVersion, ModelVersion, QueryStatus, RetrievalTask
from ferret.core.db.synthetic import document_texts, get_run, run_queries, training_pairs
from ferret.core.db.task import example_document
from ferret.core.encoder.registry import BASE_MODEL_NAME, ModelRegistry
from ferret.core.errors import ConflictError, NotFoundError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.llm.base import LLMBackend
from ferret.core.pipeline.state import PipelineConfig, PipelineState
from ferret.core.settings import FerretSettings
from ferret.core.synth.filters import FilterConfig, Retriever, apply_filters, length_reason
from ferret.core.synth.generation import generate
from ferret.core.synth.query_text import is_near_verbatim_copy, normalize
from ferret.core.synth.retrievers import BM25Retriever, EncoderRetriever
from ferret.core.training.guard import GuardEvidence, GuardReport, GuardScores, LabelledQuery, run_guard

Status = Callable[[str, float], None]
"""(stage message, fraction of the stage done)."""

STAGES = ("generate", "filter", "train", "guard", "index")
"""The stages in order; job progress counts them."""


def _quiet(message: str, fraction: float) -> None:
    """The default status: report nothing."""


def length_bounds(task: RetrievalTask) -> dict[str, int]:
    """Query length limits that follow the task's own examples: keyword-style tasks (NFCorpus: "kidney") must
    keep one-word queries, question tasks drop fragments. Zero-shot tasks keep the filter's defaults."""
    lengths = [len(example.query.split()) for example in task.examples]
    if not lengths:
        return {}
    return {"min_words": max(1, min(lengths) // 2), "max_words": max(40, 2 * max(lengths))}


def is_held_out(document_id: int, fraction: float, seed: int) -> bool:
    """Whether a document is held out for the guard: a seeded hash of its id, not a shuffle of the documents that
    kept queries, so every recipe of a task (whatever its filters dropped) is judged on the same documents, and the
    guard stage finds the very documents the train stage left out."""
    if fraction <= 0:
        return False
    digest = hashlib.blake2b(f"{seed}:{document_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def split_held_out(pairs: list[tuple[str, int]], fraction: float, seed: int) -> tuple[list[tuple[str, int]], ...]:
    """(training pairs, held-out pairs): whole documents are held out (never a document's other queries in
    training), chosen by ``is_held_out``."""
    held = {document_id for _, document_id in pairs if is_held_out(document_id, fraction, seed)}
    return [p for p in pairs if p[1] not in held], [p for p in pairs if p[1] in held]


def held_out_queries(
    session: Session, run: GenerationRun, task: RetrievalTask, texts: dict[int, str], fraction: float, seed: int
) -> list[LabelledQuery]:
    """The guard's synthetic evidence: every generated query of the held-out documents that passes the basic checks
    (length, copy of an example, near-verbatim copy of its document), whatever the recipe's own filters kept. Every
    recipe of a task is then judged on the same queries, and a recipe that filters hard (round trip) still leaves the
    guard enough of them."""
    lengths = length_bounds(task)
    bounds = FilterConfig(min_words=lengths.get("min_words", 3), max_words=lengths.get("max_words", 40))
    examples = {normalize(example.query) for example in task.examples}
    seen: set[tuple[str, int]] = set()
    evidence = []
    for query in run_queries(session, run, [QueryStatus.OK, QueryStatus.DROPPED]):
        key = (normalize(query.text), query.document_id)
        if (
            key in seen
            or not is_held_out(query.document_id, fraction, seed)
            or query.document_id not in texts
            or length_reason(query.text, bounds) is not None
            or key[0] in examples
            or is_near_verbatim_copy(query.text, texts[query.document_id])
        ):
            continue
        seen.add(key)
        evidence.append(LabelledQuery(query.text, query.document_id))
    return evidence


def guard_report_from_dict(data: dict[str, Any]) -> GuardReport:
    """A stored guard report (``GuardReport.as_dict``) back as the dataclass."""
    return GuardReport(
        candidate=GuardScores(**data["candidate"]),
        reference=GuardScores(**data["reference"]),
        passed=bool(data["passed"]),
        reason=str(data["reason"]),
        examples=int(data["examples"]),
        held_out=int(data["held_out"]),
        documents=int(data["documents"]),
        held_out_gain_low=float(data.get("held_out_gain_low", 0.0)),
    )


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
    return _passage_texts(document_texts(session, corpus))


def _passage_texts(documents: dict[int, tuple[str, str]]) -> dict[int, str]:
    """Document id → the text a model reads (title + text), from ``document_texts``."""
    return {doc_id: passage_text(title, body) for doc_id, (title, body) in documents.items()}


def reference_model_name(session: Session, settings: FerretSettings, corpus: Corpus) -> str:
    """The model the guard compares against: the one behind the corpus's active index version, else the base."""
    active = active_index_version(session, corpus)
    if active is not None:
        return active.model_version.name
    ModelRegistry(session, settings).ensure_base()
    return BASE_MODEL_NAME


def generate_stage(session: Session, state: PipelineState, llm: LLMBackend, status: Status = _quiet) -> PipelineState:
    """Synthetic queries for the task's documents (resumed, or reused when the same settings already ran)."""
    started = time.perf_counter()
    config = state.config
    run = generate(
        session,
        _task(session, state),
        llm,
        queries_per_doc=config.queries_per_doc,
        max_documents=config.max_documents,
        reuse_finished=True,  # a re-run (other training settings) reuses the queries it already paid for
        progress=lambda done, total: status("generating queries", done / max(total, 1)),
    )
    return state.advance("generate", time.perf_counter() - started, run_id=run.id)


def filter_stage(
    session: Session, settings: FerretSettings, state: PipelineState, status: Status = _quiet
) -> PipelineState:
    """Length, copy, duplicate and round-trip filters over the run, from scratch (earlier drops are undone)."""
    started = time.perf_counter()
    if state.run_id is None:
        raise ValueError("the filter stage needs the generation run of the generate stage")
    config = state.config
    task = _task(session, state)
    run = get_run(session, state.run_id)
    status("filtering", 0.0)
    round_trip: Retriever | None = None
    if config.round_trip == "bm25":
        round_trip = BM25Retriever.for_corpus(session, task.corpus)
    elif config.round_trip != "none":
        registry = ModelRegistry(session, settings)
        round_trip = EncoderRetriever.for_corpus(
            session, task.corpus, registry.encoder(registry.get(config.round_trip))
        )
    basic: dict[str, Any] = (
        length_bounds(task)
        if config.basic_filters
        else {"min_words": 0, "max_words": 10**6, "drop_copies": False, "dedupe": False}
    )
    report = apply_filters(
        session,
        run,
        FilterConfig(round_trip=round_trip, round_trip_k=config.round_trip_k, best_of_n=config.best_of_n, **basic),
    )
    session.commit()
    status("filtering", 1.0)
    return state.advance("filter", time.perf_counter() - started, filters=report.as_dict())


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


def train_stage(
    session: Session, settings: FerretSettings, state: PipelineState, status: Status = _quiet
) -> PipelineState:
    """Fine-tune the base dual encoder on the filtered pairs (held-out documents left out) and register it."""
    import torch

    from ferret.core.training.config import DualEncoderTrainingConfig
    from ferret.core.training.dual_encoder_trainer import train_dual_encoder
    from ferret.core.training.hard_negatives import bm25_hard_negatives

    started = time.perf_counter()
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
    run = get_run(session, state.run_id)
    train, held_out = split_held_out(training_pairs(session, run), config.held_out_fraction, config.seed)
    texts = _document_passages(session, task.corpus)
    overrides: dict[str, Any] = {
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
    negatives = None
    if config.hard_negatives == "bm25":
        status("mining BM25 hard negatives", 0.0)
        negatives = bm25_hard_negatives(BM25Retriever.for_corpus(session, task.corpus), train, texts, seed=config.seed)
    session.commit()  # end the read transaction: training takes minutes
    path = train_dual_encoder(
        training,
        [query for query, _ in train],
        [texts[doc_id] for _, doc_id in train],
        negatives=negatives,
        corpus=list(texts.values()) if config.cropping_warmup_steps else None,
        on_step=lambda step, total, loss: status("training", step / max(total, 1)),
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


def guard_evidence(session: Session, task: RetrievalTask, run: GenerationRun, config: PipelineConfig) -> GuardEvidence:
    """What the guard judges a candidate on: the task's examples and the clean held-out queries of ``run``, ranked
    among a seeded sample of the corpus."""
    raw = document_texts(session, task.corpus)  # read once: the passages to rank and BM25's index
    texts = _passage_texts(raw)
    held_out = held_out_queries(session, run, task, texts, config.held_out_fraction, config.seed)
    examples = [
        LabelledQuery(example.query, document.id)
        for example in task.examples
        if (document := example_document(session, task, example)) is not None
    ]
    bm25_first = BM25Retriever(raw, depth=1)([q.text for q in held_out])
    bm25_labelled = [
        LabelledQuery(query.text, ranked[0])
        for query, ranked in zip(held_out, bm25_first, strict=True)
        if ranked and ranked[0] in texts
    ]
    return GuardEvidence.sample(
        examples, held_out, texts, distractors=2_000, seed=config.seed, bm25_labelled=bm25_labelled
    )


def guard_stage(
    session: Session, settings: FerretSettings, state: PipelineState, status: Status = _quiet
) -> PipelineState:
    """Compare the candidate with the reference model on held-out and example queries; store the figures."""
    started = time.perf_counter()
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
    evidence = guard_evidence(session, task, get_run(session, state.run_id), config)
    guard = run_guard(registry.encoder(model), registry.encoder(reference), evidence)
    model.metrics = {"guard": guard.as_dict(), "reference_model": reference.name}
    session.commit()
    status("guard: comparing with the active model", 1.0)
    return state.advance("guard", time.perf_counter() - started, guard=guard.as_dict())


def _live_version_of(session: Session, corpus: Corpus, model: ModelVersion) -> IndexVersion | None:
    versions = list_index_versions(session, corpus)
    return next((v for v in versions if v.model_version_id == model.id and v.state in LIVE_STATES), None)


def index_stage(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    state: PipelineState,
    status: Status = _quiet,
) -> PipelineState:
    """Build the model's index version when it is to be promoted (or with ``never``, to compare), then promote."""
    started = time.perf_counter()
    promote = should_promote(state)
    if not promote and state.config.promote != "never":
        return replace(state, promoted=False)  # nothing built: no index seconds, as before the split
    model = get_model_version(session, state.model_name)
    corpus = _task(session, state).corpus
    versions = VersionedCollection(session, settings, backend, corpus)
    index_version = _live_version_of(session, corpus, model)  # a redelivery finds its finished build
    if index_version is None:
        index_version = versions.build(model, progress=lambda done, total: status("indexing", done / max(total, 1)))
    if promote:
        versions.promote(index_version)
        versions.collect()
    return state.advance("index", time.perf_counter() - started, promoted=promote, index_version_id=index_version.id)
