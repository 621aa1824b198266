"""The one door through which the admin and the terminal client reach the domain: ``ferret.runtime``'s composition
root (settings, migrated database, index backend, job queue, connectors) and a session per unit of work.

The runtime is opened once per process, as the HTTP API opens it once in its lifespan: Streamlit runs each page in
a thread of its own, and opening a runtime per page run would migrate the database (Alembic is not thread-safe)
and open the index again on every click. It is rebuilt only when the settings name other stores (tests change
``FERRET_HOME`` between tests).

Example:
    >>> with open_context() as context:
    ...     list_corpora(context.session)
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from ferret.core.db.engine import session_scope
from ferret.core.settings import FerretSettings, get_settings
from ferret.runtime.context import AppContext, Runtime, open_runtime

_lock = threading.Lock()
_open: tuple[tuple[str, ...], Runtime, ExitStack] | None = None


def _stores(settings: FerretSettings) -> tuple[str, ...]:
    return (settings.database_url, str(settings.qdrant_path), settings.qdrant_url or "", settings.broker_url or "")


def process_runtime() -> Runtime:
    """This process's runtime, opened on first use (and again if the configured stores changed)."""
    global _open
    settings = get_settings()
    with _lock:
        if _open is not None and _open[0] == _stores(settings):
            return _open[1]
        if _open is not None:
            _open[2].close()
            _open = None
        stack = ExitStack()
        runtime = stack.enter_context(open_runtime(settings))
        _open = (_stores(settings), runtime, stack)
        return runtime


def close_runtime() -> None:
    global _open
    with _lock:
        if _open is not None:
            _open[2].close()
            _open = None


atexit.register(close_runtime)


@contextmanager
def open_context() -> Iterator[AppContext]:
    """The process's runtime and a new session that commits on success and rolls back on error."""
    runtime = process_runtime()
    with session_scope(runtime.settings.database_url) as session:
        yield AppContext(runtime, session)


__all__ = ["AppContext", "close_runtime", "open_context", "process_runtime"]
