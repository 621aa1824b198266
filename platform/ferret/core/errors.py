"""Errors a user can cause. Each carries one sentence that says what went wrong and what to do.

The CLI and the API print the message and no stack trace; anything else is a bug and keeps its trace.

Where the sentence's remedy is a CLI command that an HTTP client could do through the API instead, the error also
carries ``over_http``, the same sentence with the route, and the API answers with that one:

    >>> error = NotFoundError("Job 9 does not exist; `ferret jobs list` shows the recent ones.",
    ...                       over_http="Job 9 does not exist; GET /v1/jobs lists the recent ones.")
    >>> error.over_http
    'Job 9 does not exist; GET /v1/jobs lists the recent ones.'
"""

from __future__ import annotations


class FerretError(Exception):
    """A mistake in input or configuration, reported as one clear sentence."""

    def __init__(self, *args: object, over_http: str | None = None) -> None:
        super().__init__(*args)
        self.over_http = over_http
        """The sentence for an API client when the message's remedy is a CLI command; None: the message itself."""

    @property
    def for_http(self) -> str:
        """The sentence the API answers with."""
        return self.over_http if self.over_http is not None else str(self)


class NotFoundError(FerretError):
    """A named corpus, model, index version or job does not exist."""


class InvalidInputError(FerretError):
    """Input that cannot be used as given (a malformed file, a bad option)."""


class ConflictError(FerretError):
    """The request contradicts the current state (e.g. promoting a version that is not ready)."""


class ForbiddenError(FerretError):
    """The caller may not do this (e.g. an admin key granting a group it does not have); HTTP 403."""


class UnavailableError(FerretError):
    """A store is busy or unreadable for now; the sentence says what to run or stop (HTTP 503)."""
