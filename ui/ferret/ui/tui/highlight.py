"""Snippets with the query's words marked: what makes a result scannable in two lines of an 80-column terminal.

Example:
    >>> snippet_text("Paris is the capital of France.", "capital france", width=40).plain
    'Paris is the capital of France.'
"""

from __future__ import annotations

import re

from rich.text import Text

from ferret.ui.query_terms import query_terms

HIGHLIGHT_STYLE = "bold reverse"


def _window(text: str, terms: list[str], width: int) -> str:
    """``width`` characters of ``text`` starting a little before the first query word (whole words, ellipses)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    positions = [lowered.find(term) for term in terms if term in lowered]
    start = max(0, min(positions) - width // 4) if positions else 0
    if start > 0:
        start = flat.find(" ", start) + 1 or start
    end = start + width
    piece = flat[start:end]
    if end < len(flat):
        piece = piece.rsplit(" ", 1)[0] + "…"
    return ("…" if start > 0 else "") + piece


def snippet_text(text: str, query: str, *, width: int = 150, style: str = HIGHLIGHT_STYLE) -> Text:
    """A window of ``text`` around the query's first word, the query's words styled."""
    terms = query_terms(query)
    return highlighted(_window(text, terms, width), query, style=style)


def highlighted(text: str, query: str, *, style: str = HIGHLIGHT_STYLE) -> Text:
    """``text`` with every occurrence of the query's words styled (case-insensitive, word starts only)."""
    rich_text = Text(text)
    for term in query_terms(query):
        rich_text.highlight_regex(re.compile(rf"\b{re.escape(term)}\w*", re.IGNORECASE), style)
    return rich_text
