"""Every kind of job Ferret runs, by its ``jobs.kind``: the declared pipelines and the one-step jobs.

The job runner, embedded mode, the dispatcher and the Celery task table (``ferret.workers.tasks.table``) all read
this table; a new pipeline (REALM) is listed here once. It imports each pipeline's declaration, not the stage
functions that train or judge models: those are named by ``StageBody`` and imported when a stage runs, so a command
that starts, retries or cancels a job imports no ML library (``tests/cli/test_startup.py``).
"""

from __future__ import annotations

from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.jobs.corpus_jobs import INDEX_BUILD, INGEST
from ferret.core.jobs.maintenance_jobs import EVAL, INDEX_REPAIR
from ferret.core.jobs.push_jobs import PUSH_INDEX
from ferret.core.jobs.source_sync import SOURCE_SYNC
from ferret.core.pipeline.declaration import Pipeline
from ferret.core.pipeline.promptagator.declaration import PROMPTAGATOR
from ferret.core.pipeline.realm.declaration import REALM

JOB_KINDS: dict[str, Pipeline[Any]] = {
    pipeline.kind: pipeline
    for pipeline in (PROMPTAGATOR, REALM, INGEST, INDEX_BUILD, SOURCE_SYNC, PUSH_INDEX, EVAL, INDEX_REPAIR)
}


def pipeline_of(kind: str) -> Pipeline[Any]:
    """The declaration of a job kind."""
    try:
        return JOB_KINDS[kind]
    except KeyError:
        raise InvalidInputError(f"Unknown job kind {kind!r}; the kinds are {', '.join(sorted(JOB_KINDS))}.") from None
