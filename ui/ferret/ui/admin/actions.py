"""The admin's actions, each one call into the same domain functions as the CLI and the API, in its own
application context (so it commits on its own and the page re-reads the new state). User mistakes raise
``FerretError`` with one sentence; the pages show it.

Kept apart from the page scripts in ``views/`` (which render when imported), so tests and other pages can call
them.

Example:
    >>> launch_pipeline("kb-qa", PipelineConfig(max_documents=8, promote="force"))
    'Job 3 started: pipeline of task kb-qa.'
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ferret.core.db.api_key import create_api_key, revoke_api_key
from ferret.core.db.corpus import get_corpus, validate_corpus_name
from ferret.core.db.models import JobState
from ferret.core.db.task import get_task
from ferret.core.errors import InvalidInputError
from ferret.core.eval.evaluate import evaluate_dataset
from ferret.core.eval.per_query import per_query_ndcg
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.ui.runtime import open_context


# -- jobs ----------------------------------------------------------------------------------------------------------
def launch_pipeline(task_name: str, config: PipelineConfig) -> str:
    with open_context() as context:
        job = context.jobs.start_job(
            "pipeline", context.session, task=get_task(context.session, task_name), config=config
        )
        return f"Job {job.id} started: pipeline of task {task_name}."


def cancel_job(job_id: int) -> str:
    with open_context() as context:
        job = context.jobs.cancel_job(context.session, job_id)
        if job.state == JobState.CANCELLED:
            return f"Job {job.id} cancelled."
        return f"Job {job.id}: cancel requested; it stops at its next progress report."


def retry_job(job_id: int) -> str:
    """The same job run again from its stored input, as `ferret jobs retry ID` and the API do (one job row; its
    stages find what the first run finished), on the workers or in a thread of this process without a broker."""
    with open_context() as context:
        job = context.jobs.retry_job(context.session, job_id)
        return f"Job {job.id} ({job.kind}) started again from its stored input."


# -- versions and evaluation ---------------------------------------------------------------------------------------
def collect_versions(corpus_name: str) -> str:
    with open_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        retired = VersionedCollection(context.session, context.settings, context.backend, corpus).collect()
        names = ", ".join(f"v{v.version}" for v in retired) or "nothing"
        return f"{corpus_name}: collected {names} (keeping the newest {context.settings.keep_index_versions})."


def write_dataset(folder: Path, corpus: bytes | None, queries: bytes, qrels: bytes, split: str) -> Path:
    """The uploaded files in the BEIR layout: corpus.jsonl (unless the set judges a corpus Ferret holds),
    queries.jsonl, qrels/<split>.tsv."""
    if not split.isidentifier():
        raise InvalidInputError(f"The split {split!r} must be a plain name such as test or dev.")
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    if corpus is not None:
        (folder / "corpus.jsonl").write_bytes(corpus)
    (folder / "queries.jsonl").write_bytes(queries)
    (folder / "qrels" / f"{split}.tsv").write_bytes(qrels)
    return folder


def evaluate_upload(
    name: str, files: dict[str, bytes], split: str, models: list[str], *, corpus: str | None = None
) -> dict[str, Any]:
    """``evaluate_dataset`` (as ``ferret eval``) on an uploaded labelled set, then each query's nDCG@10 per system.

    With ``corpus``, the uploaded queries and qrels judge that corpus (qrels name its documents by external id) and
    no corpus.jsonl is needed; else the upload's corpus.jsonl is indexed as the corpus ``eval-<name>``.
    """

    corpus_name = corpus if corpus is not None else validate_corpus_name(f"eval-{name}")
    if not models:
        raise InvalidInputError("Choose at least one model version to evaluate.")
    with tempfile.TemporaryDirectory(prefix="ferret-eval-") as scratch:
        dataset = write_dataset(
            Path(scratch) / validate_corpus_name(f"eval-{name}"),
            None if corpus is not None else files["corpus"],
            files["queries"],
            files["qrels"],
            split,
        )
        with open_context() as context:
            rows = evaluate_dataset(
                context.session,
                context.settings,
                context.backend,
                dataset,
                connectors=context.connectors,
                split=split,
                models=models,
                modes=("dense", "hybrid"),
                corpus_name=corpus_name,
            )
            queries, per_query = per_query_ndcg(
                context.session,
                context.settings,
                context.backend,
                dataset,
                models=models,
                corpus_name=corpus_name,
                split=split,
            )
    table = [
        {"system": row.system if row.model is None else f"{row.model} ({row.mode})", **row.metrics} for row in rows
    ]
    return {"table": table, "queries": queries, "per_query": per_query}


# -- access --------------------------------------------------------------------------------------------------------
def create_key(name: str, scopes: list[str], groups_text: str) -> tuple[str, str]:
    """(what happened, the key's plaintext: shown once, only its hash is stored)."""
    groups = [g.strip() for g in groups_text.split(",") if g.strip()]
    with open_context() as context:
        key, plaintext = create_api_key(context.session, name, scopes, groups)
        context.session.commit()
        return f"Created API key {key.name}; copy it now: only its hash is kept.", plaintext


def revoke_key(name: str) -> str:
    with open_context() as context:
        key = revoke_api_key(context.session, name)
        context.session.commit()
        return f"Revoked API key {key.name}: every request with it now gets 401."
