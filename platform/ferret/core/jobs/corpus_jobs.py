"""One-step jobs on a corpus: ingest a source, build (and optionally promote) an index version.

Each is declared as a pipeline of one stage (``INGEST``, ``INDEX_BUILD``), so the job runner, embedded mode and the
Celery task table treat them like any pipeline. Both are safe to deliver twice: an ingest skips documents whose
content hash is unchanged and point ids are deterministic; an index build killed half-way is marked failed and
started again by ``VersionedCollection.build``, and a finished build is found again through the job's result, so a
redelivery never builds a second version.

Example:
    >>> run_job(settings, INDEX_BUILD, {"job_id": 7, "corpus": "docs", "model": "base", "promote": True})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferret.core.corpus.ingest import Ingestor, IngestReport
from ferret.core.db.audit import SYSTEM_ACTOR
from ferret.core.db.corpus import create_corpus, find_corpus, forget_empty_corpus, get_corpus
from ferret.core.db.index_version import LIVE_STATES
from ferret.core.db.job import get_job, save_result
from ferret.core.db.models import Corpus, IndexVersion
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import (
    JobLaunch,
    LaunchContext,
    MissingResource,
    Pipeline,
    Resource,
    Stage,
    StageContext,
    WorkerQueue,
    json_state,
    payload_job_id,
)

JOB_INGEST = "ingest"
JOB_INDEX_BUILD = "index_build"

Payload = dict[str, Any]


def ingest_source(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, corpus, kind (a connector kind), config (its JSON config), incremental, and ``created_corpus``
    (the corpus's chunking) when the command that started the job created the corpus for it. Returns the report.

    A first ingest that fails removes the empty corpus it was started with, wherever it runs (the command's thread,
    a detached runner, a worker), so no partial state is left; a retry of the job creates the corpus again."""
    session, progress = context.session, context.progress
    created = payload.get("created_corpus")
    corpus = _corpus_of(context, payload)

    def show(report: IngestReport) -> None:
        context.add_counts(added=report.added, updated=report.updated, unchanged=report.unchanged)
        progress("ingesting", 0.0)  # a source does not say how many documents it holds

    try:
        connector = context.connectors(payload["kind"], **dict(payload.get("config") or {}))
        report = Ingestor(session, context.settings, context.backend, corpus, progress=show).run(
            connector, incremental=bool(payload.get("incremental"))
        )
    except BaseException:
        if created is not None:
            forget_empty_corpus(session, corpus)
        raise
    return report.as_dict()


def _corpus_of(context: StageContext, payload: Payload) -> Corpus:
    """The job's corpus; one its first run created and then removed (that run failed) is created again."""
    session, created = context.session, payload.get("created_corpus")
    if created is None or find_corpus(session, payload["corpus"]) is not None:
        return get_corpus(session, payload["corpus"])
    corpus = create_corpus(session, payload["corpus"], **dict(created))
    get_job(session, int(payload["job_id"])).corpus_id = corpus.id
    session.commit()
    return corpus


def build_index(context: StageContext, payload: Payload) -> Payload:
    """Payload: job_id, corpus, model (a model version name), promote (bool). Returns the index version built."""
    session, settings = context.session, context.settings
    corpus = get_corpus(session, payload["corpus"])
    model = ModelRegistry(session, settings).get(payload["model"])
    session.commit()
    job_id = int(payload["job_id"])
    # A redelivery finds the version its first delivery built in the job's result.
    built = (get_job(session, job_id).result or {}).get("index_version_id")
    reuse = session.get(IndexVersion, built) if built is not None else None

    def remember(index_version: IndexVersion) -> None:
        save_result(session, job_id, {"index_version_id": index_version.id})
        session.commit()

    index_version = VersionedCollection(session, settings, context.backend, corpus).publish(
        model,
        reuse=reuse if reuse is not None and reuse.state in LIVE_STATES else None,
        promote=bool(payload.get("promote")),
        progress=context.progress,
        on_built=remember,
        actor=str(payload.get("actor") or SYSTEM_ACTOR),
    )
    return {
        "index_version_id": index_version.id,
        "collection": index_version.collection,
        "version": index_version.version,
    }


def prepare_ingest(
    context: LaunchContext,
    *,
    corpus: Corpus | str,
    source_kind: str,
    config: Mapping[str, Any],
    incremental: bool = False,
    created_corpus: bool = False,
) -> JobLaunch:
    """An ingest of one source (connector ``source_kind`` with its JSON ``config``) into an existing ``corpus``;
    ``created_corpus``: the caller has just created it for this ingest, so a failure removes it (``ingest_source``).

    The connector is built once here, so an unknown kind or a bad configuration is the caller's one-sentence error
    now, not a line in a worker's log."""
    row = get_corpus(context.session, corpus) if isinstance(corpus, str) else corpus
    if context.connectors is None:
        raise MissingResource("an ingest job is started with the connector registry")
    context.connectors(source_kind, **dict(config))
    params = {"kind": source_kind, "config": dict(config), "incremental": incremental}
    first: Payload = {}
    if created_corpus:
        chunking = {"max_passage_tokens": row.max_passage_tokens, "passage_overlap_tokens": row.passage_overlap_tokens}
        first = {"created_corpus": chunking}
    return JobLaunch(row.id, lambda job_id: (params, {"job_id": job_id, "corpus": row.name, **params, **first}))


def prepare_index_build(
    context: LaunchContext,
    *,
    corpus: Corpus | str,
    model: str = "base",
    promote: bool = False,
    actor: str = SYSTEM_ACTOR,
) -> JobLaunch:
    """An index build of ``corpus`` with model version ``model`` (which must exist), promoted when asked; the audit
    trail names ``actor`` as the promoter."""
    row = get_corpus(context.session, corpus) if isinstance(corpus, str) else corpus
    name = ModelRegistry(context.session, context.settings).checked_name(model)
    params = {"model": name, "promote": promote, "actor": actor}
    return JobLaunch(row.id, lambda job_id: (params, {"job_id": job_id, "corpus": row.name, **params}))


INGEST: Pipeline[Payload] = Pipeline(
    kind=JOB_INGEST,
    stages=(
        Stage(
            "ingest",
            ingest_source,
            WorkerQueue.CPU,
            needs=frozenset({Resource.CONNECTORS, Resource.INDEX}),
            task="ferret.corpus.ingest_source",
        ),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    description="Ingest one source into a corpus (live index versions are kept in sync).",
    prepare=prepare_ingest,
)

INDEX_BUILD: Pipeline[Payload] = Pipeline(
    kind=JOB_INDEX_BUILD,
    stages=(
        Stage(
            "index", build_index, WorkerQueue.GPU, needs=frozenset({Resource.INDEX}), task="ferret.corpus.build_index"
        ),
    ),
    load=json_state,
    dump=json_state,
    job_id=payload_job_id,
    description="Embed a corpus with a model version into a new index version, and promote it when asked.",
    prepare=prepare_index_build,
)
