"""Errors a user can cause. Each carries one sentence that says what went wrong and what to do.

The CLI and the API print the message and no stack trace; anything else is a bug and keeps its trace.
"""


class FerretError(Exception):
    """A mistake in input or configuration, reported as one clear sentence."""


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
