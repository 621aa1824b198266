"""The one progress protocol: ``progress(activity, fraction)``.

Every long function of the domain (generation, index builds, training, pipeline stages, jobs) reports through it:
``activity`` names what runs now ("generating queries", "indexing"), ``fraction`` is how much of it is done, in
[0, 1]. A job passes ``ferret.core.jobs.progress.JobProgress`` (written into the job row, raises at a cancel), the
CLI a rich progress bar, tests a list's ``append``.

Example:
    >>> step = per_item(progress, "indexing")  # for a loop that knows done and total
    >>> step(50, 200)  # reports ("indexing", 0.25)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


class Progress(Protocol):
    def __call__(self, activity: str, fraction: float, /) -> None: ...


@runtime_checkable
class CountingProgress(Progress, Protocol):
    """A progress that also shows counts beside the bar (a job's ``JobProgress``)."""

    def add_counts(self, **counts: Any) -> None: ...


def quiet(activity: str, fraction: float) -> None:
    """Report nothing (the default)."""


def per_item(progress: Progress, activity: str) -> Callable[[int, int], None]:
    """``(done, total)`` as ``progress(activity, done / total)``, for loops that count items."""

    def report(done: int, total: int) -> None:
        progress(activity, done / max(total, 1))

    return report
