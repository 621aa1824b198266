"""The one door through which the admin and the terminal client reach the domain: the composition root's
``app_context`` (settings, migrated session, index backend, job queue), exactly as the CLI gets it.

Example:
    >>> with open_context() as context:
    ...     list_corpora(context.session)
"""

from __future__ import annotations

from ferret.runtime.context import AppContext, app_context

open_context = app_context

__all__ = ["AppContext", "open_context"]
