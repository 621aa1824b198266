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
