"""Snippets with the query's words marked: what makes a result scannable in two lines of an 80-column terminal.

Example:
    >>> snippet_text("Paris is the capital of France.", "capital france", width=40).plain
    'Paris is the capital of France.'
"""

from __future__ import annotations

from rich.text import Text

from ferret.core.search.snippets import snippet_window, terms_pattern

HIGHLIGHT_STYLE = "bold reverse"


def snippet_text(text: str, query: str, *, width: int = 150, style: str = HIGHLIGHT_STYLE) -> Text:
    """A window of ``text`` around the query's first word, the query's words styled."""
    return highlighted(snippet_window(text, query, width=width), query, style=style)


def highlighted(text: str, query: str, *, style: str = HIGHLIGHT_STYLE) -> Text:
    """``text`` with every word that starts with one of the query's words styled (case-insensitive)."""
    rich_text = Text(text)
    pattern = terms_pattern(query)
    if pattern is not None:
        rich_text.highlight_regex(pattern, style)
    return rich_text
