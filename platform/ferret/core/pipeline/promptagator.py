"""The Promptagator pipeline for one task: generate → filter → hold out → train → register → guard → index → promote.

Every stage is resumable or idempotent on its own (generation resumes its run, filters are re-applied from scratch,
training writes a new model version, index builds are versioned), so a failed pipeline is simply run again.
Promotion is ``auto`` by default: only when the guard measures a gain over the active model (``training.guard``).

Example:
    >>> result = run_pipeline(session, settings, index_backend, task, llm, PipelineConfig(max_documents=200))
    >>> result.guard.passed, result.promoted
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.index_version import active_index_version
from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import GenerationRun, IndexVersion, ModelVersion, RetrievalTask
from ferret.core.db.synthetic import document_texts, training_pairs
from ferret.core.db.task import example_document
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.llm.base import LLMBackend
from ferret.core.settings import FerretSettings
from ferret.core.synth.filters import FilterConfig, FilterReport, Retriever, apply_filters
from ferret.core.synth.generation import generate
from ferret.core.synth.retrievers import BM25Retriever, EncoderRetriever
from ferret.core.training.config import DualEncoderTrainingConfig
from ferret.core.training.dual_encoder_trainer import train_dual_encoder
from ferret.core.training.guard import GuardEvidence, GuardReport, LabelledQuery, run_guard
from ferret.core.training.hard_negatives import bm25_hard_negatives

Status = Callable[[str, float], None]
"""(stage message, fraction of the stage done)."""


@dataclass(frozen=True)
class PipelineConfig:
    """JSON-serialisable; stored with the model version it produced."""

    queries_per_doc: int | None = None
    max_documents: int | None = None
    round_trip: str = "base"
    """Retriever of the round-trip filter: none, bm25, base, or the name of a model version (Promptagator's own
    recipe filters with a retriever trained on the unfiltered pairs)."""
    basic_filters: bool = True
    """Length, copy and duplicate filters; off for the 'unfiltered' baseline."""
    round_trip_k: int = 1
    best_of_n: bool = False
    held_out_fraction: float = 0.1
    learning_rate: float = 1e-5
    max_steps: int | None = None
    batch_size: int | None = None
    base_weight: float = 0.0
    hard_negatives: Literal["none", "bm25"] = "none"
    """BM25 hard negatives: each pair also gets the best BM25 passage that is not its own document."""
    promote: Literal["auto", "force", "never"] = "auto"
    model_name: str | None = None
    seed: int = 13

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PipelineResult:
    run: GenerationRun
    filters: FilterReport
    model: ModelVersion
    guard: GuardReport
    index_version: IndexVersion | None
    promoted: bool
    seconds: dict[str, float] = field(default_factory=dict)


def length_bounds(task: RetrievalTask) -> dict[str, int]:
    """Query length limits that follow the task's own examples: keyword-style tasks (NFCorpus: "kidney") must
    keep one-word queries, question tasks drop fragments. Zero-shot tasks keep the filter's defaults."""
    lengths = [len(example.query.split()) for example in task.examples]
    if not lengths:
        return {}
    return {"min_words": max(1, min(lengths) // 2), "max_words": max(40, 2 * max(lengths))}


def _split_held_out(pairs: list[tuple[str, int]], fraction: float, seed: int) -> tuple[list[tuple[str, int]], ...]:
    """Hold out whole documents (never a document's other queries in training) for the guard."""
    documents = sorted({document_id for _, document_id in pairs})
    random.Random(seed).shuffle(documents)
    held = set(documents[: max(1, int(len(documents) * fraction))]) if fraction > 0 else set()
    return [p for p in pairs if p[1] not in held], [p for p in pairs if p[1] in held]


def run_pipeline(
    session: Session,
    settings: FerretSettings,
    index_backend: IndexBackend,
    task: RetrievalTask,
    llm: LLMBackend,
    config: PipelineConfig = PipelineConfig(),
    *,
    status: Status = lambda message, fraction: None,
) -> PipelineResult:
    seconds: dict[str, float] = {}
    corpus = task.corpus
    registry = ModelRegistry(session, settings)
    base = registry.ensure_base()
    active = active_index_version(session, corpus)
    reference = active.model_version if active is not None else base
    name = config.model_name or f"{task.name}-{int(time.time())}"
    if find_model_version(session, name) is not None:
        raise ConflictError(f"Model version {name!r} already exists; choose another --model-name.")

    started = time.perf_counter()
    run = generate(
        session,
        task,
        llm,
        queries_per_doc=config.queries_per_doc,
        max_documents=config.max_documents,
        reuse_finished=True,  # a re-run (other training settings) reuses the queries it already paid for
        progress=lambda done, total: status("generating queries", done / max(total, 1)),
    )
    seconds["generate"] = time.perf_counter() - started

    started = time.perf_counter()
    status("filtering", 0.0)
    round_trip: Retriever | None = None
    if config.round_trip == "bm25":
        round_trip = BM25Retriever.for_corpus(session, corpus)
    elif config.round_trip != "none":
        round_trip = EncoderRetriever.for_corpus(session, corpus, registry.encoder(registry.get(config.round_trip)))
    basic: dict[str, Any] = (
        length_bounds(task)
        if config.basic_filters
        else {"min_words": 0, "max_words": 10**6, "drop_copies": False, "dedupe": False}
    )
    filters = apply_filters(
        session,
        run,
        FilterConfig(round_trip=round_trip, round_trip_k=config.round_trip_k, best_of_n=config.best_of_n, **basic),
    )
    session.commit()
    seconds["filter"] = time.perf_counter() - started

    started = time.perf_counter()
    train, held_out = _split_held_out(training_pairs(session, run), config.held_out_fraction, config.seed)
    texts = {doc_id: passage_text(title, body) for doc_id, (title, body) in document_texts(session, corpus).items()}
    overrides: dict[str, Any] = {
        "learning_rate": config.learning_rate,
        "base_weight": config.base_weight,
        "hard_negatives": config.hard_negatives,
    }
    overrides.update({k: v for k, v in (("max_steps", config.max_steps), ("batch_size", config.batch_size)) if v})
    training = DualEncoderTrainingConfig.scaled(
        len(train),
        gpu=torch.cuda.is_available(),
        base_model=base.path,
        output_dir=str(registry.model_dir(name)),
        seed=config.seed,
        device=settings.device,
        **overrides,
    )
    negatives = None
    if config.hard_negatives == "bm25":
        status("mining BM25 hard negatives", 0.0)
        negatives = bm25_hard_negatives(BM25Retriever.for_corpus(session, corpus), train, texts, seed=config.seed)
    path = train_dual_encoder(
        training,
        [query for query, _ in train],
        [texts[doc_id] for _, doc_id in train],
        negatives=negatives,
        on_step=lambda step, total, loss: status("training", step / max(total, 1)),
    )
    model = registry.register(name, path, parent=base)
    model.training_config = {
        "training": training.to_json(),
        "pipeline": config.to_json(),
        "task": task.name,
        "generation_run": run.id,
        "filters": filters.as_dict(),
        "pairs": {"train": len(train), "held_out": len(held_out)},
    }
    seconds["train"] = time.perf_counter() - started

    started = time.perf_counter()
    status("guard: comparing with the active model", 0.0)
    examples = []
    for example in task.examples:
        document = example_document(session, task, example)
        if document is not None:
            examples.append(LabelledQuery(example.query, document.id))
    evidence = GuardEvidence.sample(
        examples, [LabelledQuery(q, d) for q, d in held_out], texts, distractors=2_000, seed=config.seed
    )
    guard = run_guard(registry.encoder(model), registry.encoder(reference), evidence)
    model.metrics = {"guard": guard.as_dict(), "reference_model": reference.name}
    session.commit()
    seconds["guard"] = time.perf_counter() - started

    promote = config.promote == "force" or (config.promote == "auto" and guard.passed)
    index_version = None
    if promote or config.promote == "never":
        started = time.perf_counter()
        versions = VersionedCollection(session, settings, index_backend, corpus)
        index_version = versions.build(model, progress=lambda done, total: status("indexing", done / total))
        if promote:
            versions.promote(index_version)
            versions.collect()
        seconds["index"] = time.perf_counter() - started
    return PipelineResult(run, filters, model, guard, index_version, promote, seconds)
