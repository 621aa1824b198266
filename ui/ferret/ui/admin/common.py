"""What every admin page shares: the application context, one-sentence errors, notices that survive a rerun.

A page never shows a traceback. A ``FerretError`` (a user's mistake, an unreachable server) is its own sentence;
anything else is a bug: its traceback goes to the server log and the page says so in one sentence.

Example:
    >>> with page_context() as context:          # inside a page: errors become st.error and stop the page
    ...     corpora = list_corpora(context.session)
    >>> st.button("Revoke", on_click=run_action, args=(partial(revoke, "ci"),))
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import streamlit as st
from pydantic import ValidationError

from ferret.core.errors import FerretError
from ferret.core.search.snippets import terms_pattern
from ferret.ui.runtime import AppContext, open_context

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

NOTICE_KEY = "ferret_admin_notice"
EVALUATION_RESULTS_KEY = "evaluation_results"
"""The last labelled-set evaluation of this browser session (Evaluation page)."""
logger = logging.getLogger("ferret.ui.admin")


def sentence(error: BaseException) -> str:
    """The one sentence a page shows for ``error``."""
    if isinstance(error, FerretError | ValidationError):
        if isinstance(error, ValidationError):
            first = error.errors()[0]
            return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}."
        return str(error)
    logger.exception("admin action failed", exc_info=error)
    return f"Something went wrong ({type(error).__name__}); the details are in the admin's log."


def run_action(action: Callable[[], str]) -> None:
    """Button callback: runs before the page reruns, so the rerun shows the new state and the outcome."""
    try:
        st.session_state[NOTICE_KEY] = ("success", action())
    except Exception as error:
        st.session_state[NOTICE_KEY] = ("error", sentence(error))


def show_notice() -> None:
    """The outcome of the last action, once."""
    notice: tuple[str, str] | None = st.session_state.pop(NOTICE_KEY, None)
    if notice is None:
        return
    kind, message = notice
    (st.success if kind == "success" else st.error)(message)


def notify(kind: str, message: str) -> None:
    """Record an outcome for ``show_notice`` (used where an action runs inline, e.g. in a form)."""
    st.session_state[NOTICE_KEY] = (kind, message)


@contextmanager
def page_context() -> Iterator[AppContext]:
    """The application context for one page run; a failure is one sentence on the page and stops the page."""
    try:
        with open_context() as context:
            yield context
    except Exception as error:
        if type(error).__name__ in ("StopException", "RerunException"):
            raise
        st.error(sentence(error))
        st.stop()


def attempt(action: Callable[[], Any]) -> Any:
    """Run ``action`` inline; on failure show its sentence and return None."""
    try:
        return action()
    except Exception as error:
        if type(error).__name__ in ("StopException", "RerunException"):
            raise
        st.error(sentence(error))
        return None


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else ""


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>~<$])")


def escape_markdown(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def highlight_markdown(text: str, query: str) -> str:
    """``text`` as Markdown with the query's words in bold (words escaped first, so a document cannot inject)."""

    pattern = terms_pattern(query)
    if pattern is None:
        return escape_markdown(text)
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        parts.append(escape_markdown(text[last : match.start()]))
        parts.append(f"**{escape_markdown(match.group(0))}**")
        last = match.end()
    parts.append(escape_markdown(text[last:]))
    return "".join(parts)


def activation_rows(history: list[Any], label: str) -> list[dict[str, Any]]:
    """The activation history of a corpus (``ferret.core.db.activation``), oldest first, one row each: ``label``
    names what was activated (index version or configuration); a withdrawn row is one a rollback went past, so the
    next Roll back does not return to it."""
    return [
        {
            label: row.version,
            "activated": f"{row.activated_at:%Y-%m-%d %H:%M:%S}",  # seconds: two can fall in one minute
            "by": row.actor,
            "how": row.via,
            "withdrawn": row.withdrawn,
        }
        for row in history
    ]
