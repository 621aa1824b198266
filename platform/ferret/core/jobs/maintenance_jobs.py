"""Long commands that are not a corpus's ingest or build, as one-step jobs: evaluating a BEIR dataset, repairing a
corpus's index. Every long command is a job row (issue 11, item 10), so `ferret jobs list` and the admin show them
while they run, and `--async` hands them to a worker or a detached runner.

Both are safe to deliver twice: an evaluation ingests by content hash and reuses a live index of each model
(``ensure_index``); a repair quarantines what is still beyond the limits and rebuilds only versions that still fail to
load.

Example:
    >>> job = runtime.jobs.start_job("eval", session, dataset="/data/scifact", split="test", models=["base"])
    >>> job = runtime.jobs.start_job("index_repair", session, corpus="kb", actor=cli_actor())
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ferret.core.db.audit import SYSTEM_ACTOR
from ferret.core.db.corpus import find_corpus, get_corpus
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import InvalidInputError
from ferret.core.eval.evaluate import corpus_name_for, evaluate_dataset, held_corpus_judged
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import (
    JobLaunch,
    LaunchContext,
    Pipeline,
    Resource,
    Stage,
    StageContext,
    WorkerQueue,
    json_state,
    payload_job_id,
)

JOB_EVAL = "eval"
JOB_INDEX_REPAIR = "index_repair"

Payload = dict[str, Any]


def run_evaluation(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, dataset (a BEIR folder), split, models, corpus. Returns the table's rows as JSON, and its
    notes (labels the corpus cannot match)."""
    notes: list[str] = []
    rows = evaluate_dataset(
        context.session,
        context.settings,
        context.backend,
        Path(payload["dataset"]),
        connectors=context.connectors,
        split=str(payload.get("split") or "test"),
        models=list(payload.get("models") or ["base"]),
        corpus_name=payload.get("corpus"),
        status=lambda message: context.progress(message, 0.0),
        notes=notes,
    )
    return {"rows": [row.as_dict() for row in rows], "notes": notes}


def prepare_evaluation(
    context: LaunchContext,
    *,
    dataset: str | Path,
    split: str = "test",
    models: Sequence[str] = ("base",),
    corpus: str | None = None,
) -> JobLaunch:
    """An evaluation of ``models`` (which must exist) on the BEIR folder ``dataset``, in corpus ``corpus`` (default
    ``beir-<folder>``)."""
    folder = Path(dataset)
    if not folder.is_dir():
        raise InvalidInputError(f"Dataset folder {folder} does not exist.")
    registry = ModelRegistry(context.session, context.settings)
    names = [registry.checked_name(name) for name in models] if models else ["base"]
    held_corpus_judged(context.session, folder, corpus)  # a set that judges nothing fails here, not in a job
    corpus_name = corpus or corpus_name_for(folder)
    existing = find_corpus(context.session, corpus_name)
    params = {"dataset": str(folder.resolve()), "split": split, "models": names, "corpus": corpus_name}
    return JobLaunch(
        existing.id if existing is not None else None, lambda job_id: (params, {"job_id": job_id, **params})
    )


def run_repair(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, corpus, actor. Returns what ``VersionedCollection.repair`` found and did."""
    corpus = get_corpus(context.session, payload["corpus"])
    versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
    report = versions.repair(actor=str(payload.get("actor") or SYSTEM_ACTOR), progress=context.progress)
    rebuilt = report.rebuilt
    return {
        "quarantined": [list(pair) for pair in report.quarantined],
        "unreadable": list(report.unreadable),
        "rebuilt": rebuilt.version if rebuilt is not None else None,
        "rebuilt_points": rebuilt.point_count if rebuilt is not None else None,
        "promoted": report.promoted,
        "expanded": list(report.expanded),
    }


def prepare_repair(context: LaunchContext, *, corpus: str, actor: str = SYSTEM_ACTOR) -> JobLaunch:
    """A repair of ``corpus``'s index versions; the audit trail names ``actor``."""
    row = get_corpus(context.session, corpus)
    params = {"actor": actor}
    return JobLaunch(row.id, lambda job_id: (params, {"job_id": job_id, "corpus": row.name, **params}))


EVAL: Pipeline[Payload] = Pipeline(
    kind=JOB_EVAL,
    stages=(
        Stage(
            "evaluate",
            run_evaluation,
            WorkerQueue.GPU,
            needs=frozenset({Resource.CONNECTORS, Resource.INDEX}),
            task="ferret.eval.evaluate",
        ),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    description="Evaluate BM25 and each model's search modes on a BEIR dataset (nDCG@10, Recall@100, MRR@10).",
    prepare=prepare_evaluation,
)

INDEX_REPAIR: Pipeline[Payload] = Pipeline(
    kind=JOB_INDEX_REPAIR,
    stages=(
        Stage("repair", run_repair, WorkerQueue.GPU, needs=frozenset({Resource.INDEX}), task="ferret.index.repair"),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    description="Quarantine documents the index cannot hold, fail versions that no longer load, rebuild from the "
    "database.",
    prepare=prepare_repair,
)
