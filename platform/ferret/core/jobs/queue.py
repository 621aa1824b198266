"""The job-queue port: how a face starts and cancels long work without knowing where it runs.

``ferret.workers.dispatch.Dispatcher`` implements it: a Celery chain across the worker queues when a broker is
configured, a thread of the calling process when none is (embedded mode). The runtime (``ferret.runtime``) builds
one per process and hands it to the CLI, the HTTP API and the admin page.

Example:
    >>> job = runtime.jobs.start_pipeline_job(session, task, PipelineConfig(promote="force"))
    >>> runtime.jobs.cancel_job(session, job.id).cancel_requested
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, Job, RetrievalTask, Source
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.realm.config import RealmConfig


class JobQueue(ABC):
    """Starts jobs (each call commits the session and returns the job row) and cancels them."""

    @abstractmethod
    def start_pipeline_job(self, session: Session, task: RetrievalTask, config: PipelineConfig) -> Job:
        """Queue the training pipeline of ``task``; the model is named ``config.model_name`` or ``<task>-job<id>``."""

    @abstractmethod
    def start_index_build_job(self, session: Session, corpus: Corpus, model: str, *, promote: bool = False) -> Job:
        """Queue an index build of ``corpus`` with model version ``model``."""

    @abstractmethod
    def start_ingest_job(
        self, session: Session, corpus: Corpus, kind: str, config: dict[str, Any], *, incremental: bool = False
    ) -> Job:
        """Queue an ingest of one source (connector ``kind`` with its JSON ``config``) into ``corpus``."""

    @abstractmethod
    def start_realm_job(
        self,
        session: Session,
        corpus: Corpus,
        config: RealmConfig,
        *,
        model_name: str | None = None,
        task: str | None = None,
        resume_from: int | None = None,
    ) -> Job:
        """Queue REALM pre-training of ``corpus``; ``resume_from`` continues a killed REALM job from its checkpoint."""

    @abstractmethod
    def start_source_sync_job(self, session: Session, source: Source, *, trigger: str = "manual") -> Job:
        """Queue a sync of a configured source (``ferret.core.jobs.source_sync``) from its checkpoint."""

    @abstractmethod
    def cancel_job(self, session: Session, job_id: int) -> Job:
        """Cancel a job: a queued one at once, a running one at its next progress report."""

    def wait(self, job_id: int, timeout_s: float | None = None) -> bool:
        """Wait for a job run by this process (embedded mode); False when it still runs after ``timeout_s``.

        A job sent to workers is not waited for here: True at once.
        """
        return True
