"""Progress of a running job, written into its row, and the cancel check that rides on every report.

Stage functions take a plain ``(activity, fraction)`` callback; ``JobProgress`` is that callback for a job. It
writes at most every ``interval_s`` (a training step or an index batch may report many times a second), each
write in its own short transaction on its own session, so the stage's own transaction is never held open by a
report, and it raises ``JobCancelled`` as soon as it sees that a cancel was requested: the stage stops where it
is, through its usual error path (a generation run keeps its committed batches, an index build drops its
partial collection).

Example:
    >>> progress = JobProgress(settings.database_url, job.id, stage="train", stage_index=2, stage_count=5)
    >>> progress("training", 0.25)  # writes stage, overall percent and counts; may raise JobCancelled
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import make_url
from sqlalchemy.exc import OperationalError

from ferret.core.db.engine import session_scope
from ferret.core.db.job import cancel_requested, update_progress
from ferret.core.errors import FerretError

LOCKED_WAIT_S = 0.25
"""How long a progress report waits for SQLite's write lock before it is dropped (the next report tries again)."""


class JobStopped(FerretError):
    """The job must not go on (cancelled, or already finished): the stage stops and the chain with it."""

    def __init__(self, job_id: int, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobCancelled(JobStopped):
    """A cancel was requested for the job; raised at the stage's next progress report."""

    def __init__(self, job_id: int) -> None:
        super().__init__(job_id, f"Job {job_id} was cancelled.")


class JobInterrupted(JobStopped):
    """The user interrupted the command that follows the job in this process (Ctrl-C); raised at the stage's next
    report, so the stage stops through its usual error path and lets go of the database before the job is marked."""

    def __init__(self, job_id: int) -> None:
        super().__init__(job_id, f"Interrupted (Ctrl-C); `ferret jobs retry {job_id}` runs it again.")


_interrupted: set[int] = set()


def interrupt(job_id: int) -> None:
    """Stop a job that a thread of this process runs, at its next progress report. No database write is needed (the
    stage may hold SQLite's write lock: a report of the interrupt would wait for it)."""
    _interrupted.add(job_id)


class JobProgress:
    """The progress callback of one stage of a job (see the module docstring)."""

    def __init__(
        self,
        database_url: str,
        job_id: int,
        *,
        stage: str,
        stage_index: int = 0,
        stage_count: int = 1,
        span: tuple[float, float] | None = None,
        interval_s: float = 0.5,
        counts: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database_url = database_url
        self._write_url = _short_wait(database_url)
        self.job_id = job_id
        self.stage = stage
        self.stage_index = stage_index
        self.stage_count = max(1, stage_count)
        self.span = span or (self.stage_index / self.stage_count, (self.stage_index + 1) / self.stage_count)
        """Where the stage starts and ends within the job (``Pipeline.span``; equal stages when not given)."""
        self.interval_s = interval_s
        self.counts: dict[str, Any] = dict(counts or {})
        self._clock = clock
        self._last_write: float | None = None
        self._activity = ""
        self._fraction = 0.0

    def __call__(self, activity: str, fraction: float) -> None:
        """Report; written when the activity changes, the stage completes, or ``interval_s`` has passed."""
        changed = activity != self._activity
        self._activity, self._fraction = activity, min(1.0, max(0.0, fraction))
        now = self._clock()
        if changed or fraction >= 1.0 or self._last_write is None or now - self._last_write >= self.interval_s:
            self.flush()

    def add_counts(self, **counts: Any) -> None:
        """Counts shown beside the progress (documents, queries kept, ...); written with the next report."""
        self.counts.update(counts)

    def flush(self) -> None:
        """Write now and check for a cancel (raises ``JobCancelled``) or an interrupt (``JobInterrupted``)."""
        if self.job_id in _interrupted:
            raise JobInterrupted(self.job_id)
        self._last_write = self._clock()
        start, end = self.span
        overall = start + self._fraction * (end - start)
        counts = {
            **self.counts,
            "activity": self._activity,
            "stage_progress": round(self._fraction, 4),
            "stage_number": self.stage_index + 1,
            "stages": self.stage_count,
        }
        try:
            with session_scope(self._write_url) as session:
                cancelled = update_progress(session, self.job_id, stage=self.stage, progress=overall, counts=counts)
        except OperationalError as error:
            if "database is locked" not in str(error.orig):
                raise
            # Embedded SQLite has one writer at a time, and a stage may hold the write lock for its whole transaction
            # (an ingest commits once, at its end): the report is dropped rather than stalling or failing the stage.
            # Reads never wait in WAL mode, so the cancel check still happens.
            with session_scope(self.database_url) as session:
                cancelled = cancel_requested(session, self.job_id)
        if cancelled:
            raise JobCancelled(self.job_id)


def _short_wait(database_url: str) -> str:
    """The URL progress reports write through: on SQLite with a short busy timeout, elsewhere unchanged."""
    if not database_url.startswith("sqlite"):
        return database_url
    url = make_url(database_url)
    return url.update_query_dict({"timeout": str(LOCKED_WAIT_S)}).render_as_string(hide_password=False)
