"""One-step jobs on a corpus: ingest a source, build (and optionally promote) an index version.

Both are safe to deliver twice: an ingest skips documents whose content hash is unchanged and point ids are
deterministic; an index build killed half-way is marked failed and started again by ``VersionedCollection.build``,
and a finished build is found again through the job's result, so a redelivery never builds a second version.

Example:
    >>> run_index_build_job(settings, {"job_id": 7, "corpus": "docs", "model": "base", "promote": True})
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.ingest import Ingestor, IngestReport
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import LIVE_STATES
from ferret.core.db.job import get_job, save_result
from ferret.core.db.models import IndexVersion
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.factory import open_backend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.jobs.progress import JobProgress
from ferret.core.jobs.runner import run_simple_job
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import ConnectorFactory


def run_ingest_job(
    settings: FerretSettings, payload: dict[str, Any], *, connectors: ConnectorFactory, retry: bool = False
) -> dict[str, Any]:
    """Payload: job_id, corpus, kind (a connector kind), config (its JSON config), incremental."""

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        corpus = get_corpus(session, payload["corpus"])
        connector = connectors(payload["kind"], **dict(payload.get("config") or {}))
        backend = open_backend(settings)

        def show(report: IngestReport) -> None:
            progress.add_counts(added=report.added, updated=report.updated, unchanged=report.unchanged)
            progress("ingesting", 0.0)  # a source does not say how many documents it holds

        try:
            report = Ingestor(session, settings, backend, corpus, progress=show).run(
                connector, incremental=bool(payload.get("incremental"))
            )
        finally:
            backend.close()
        return report.as_dict()

    return run_simple_job(settings, int(payload["job_id"]), "ingest", work, retry=retry)


def run_index_build_job(settings: FerretSettings, payload: dict[str, Any], *, retry: bool = False) -> dict[str, Any]:
    """Payload: job_id, corpus, model (a model version name), promote (bool)."""

    def work(session: Session, progress: JobProgress) -> dict[str, Any]:
        corpus = get_corpus(session, payload["corpus"])
        model = ModelRegistry(session, settings).get(payload["model"])
        session.commit()
        backend = open_backend(settings)
        try:
            versions = VersionedCollection(session, settings, backend, corpus)
            job_id = int(payload["job_id"])
            # A redelivery finds the version its first delivery built in the job's result.
            built = (get_job(session, job_id).result or {}).get("index_version_id")
            index_version = session.get(IndexVersion, built) if built is not None else None
            if index_version is None or index_version.state not in LIVE_STATES:
                index_version = versions.build(model, progress=lambda d, t: progress("indexing", d / max(t, 1)))
                save_result(session, job_id, {"index_version_id": index_version.id})
                session.commit()
            if payload.get("promote"):
                versions.promote(index_version)
                versions.collect()
            return {
                "index_version_id": index_version.id,
                "collection": index_version.collection,
                "version": index_version.version,
            }
        finally:
            backend.close()

    return run_simple_job(settings, int(payload["job_id"]), "index", work, retry=retry)
