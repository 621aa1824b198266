"""The detached runner of embedded mode: ``python -m ferret.workers.detached JOB_ID`` runs one job to its end.

A CLI command started with ``--async`` and no broker creates its job row (with the payload of its first stage),
starts this module in a session of its own and exits; this process then runs every stage in turn, exactly as the
embedded thread or the workers would (``ferret.core.jobs.runner.run_job``), writing progress, result or error to the
row. It names itself in the row (``embedded:<host>:<pid>``), so when it dies (killed, out of memory, a reboot) the
next Ferret command on this host, or ``ferret jobs follow``, marks the job failed; ``ferret jobs retry`` then runs
it again as the same job, and the idempotent stages find what was already done.

Example:
    $ python -m ferret.workers.detached 42   # what ``ferret ingest ... --async`` starts; exit 0 when it succeeded
"""

from __future__ import annotations

import logging
import os
import sys

from ferret.connectors.registry import build_connector
from ferret.core.db.engine import session_scope
from ferret.core.db.job import embedded_owner, get_job, set_celery_id
from ferret.core.db.models import JobState
from ferret.core.jobs.catalog import pipeline_of
from ferret.core.jobs.runner import run_job
from ferret.core.settings import FerretSettings, get_settings

logger = logging.getLogger("ferret.workers.detached")


def run_detached(job_id: int, settings: FerretSettings | None = None) -> bool:
    """Run job ``job_id`` from its stored payload in this process; True when it succeeded."""
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        if job.payload is None:
            logger.error("job %s kept no payload to run", job_id)
            return False
        pipeline, payload = pipeline_of(job.kind), dict(job.payload)
        # The starter writes this too, right after starting us; written here as well in case it died in between.
        set_celery_id(session, job_id, embedded_owner())
    logger.info("running job %s (%s) in process %s", job_id, pipeline.kind, os.getpid())
    run_job(settings, pipeline, payload, connectors=build_connector)
    with session_scope(settings.database_url) as session:
        job = get_job(session, job_id)
        logger.info("job %s ended %s%s", job_id, job.state.value, f": {job.error}" if job.error else "")
        return job.state == JobState.SUCCEEDED


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1 or not arguments[0].isdigit():
        sys.exit("usage: python -m ferret.workers.detached JOB_ID")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(0 if run_detached(int(arguments[0])) else 1)


if __name__ == "__main__":
    main()
