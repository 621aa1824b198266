"""What every front end shows of a result: the query's words, and a window of the passage around the first of them.

Shared by ``ferret search``, the terminal client and the admin's playground, so a result reads the same in each;
each front end styles the words its own way (rich styles, Markdown bold) with ``terms_pattern``.

Example:
    >>> query_terms("What is the capital of France?")
    ['capital', 'france']
    >>> snippet_window("A long text … Paris is the capital of France.", "capital", width=30)
    '…the capital of France.'
    >>> highlight_spans("…the capital of France.", "capital of France")
    [(5, 12), (16, 22)]
"""

from __future__ import annotations

import re
from functools import lru_cache

SNIPPET_CHARS = 240
"""A result's snippet: about three lines of a results page (the CLI's, and the API's ``snippet``)."""
_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "who",
        "why",
        "with",
    }
)


def query_terms(query: str) -> list[str]:
    """The words worth marking: lower-cased, stop words and one-letter words left out, longest first (so a longer
    word is marked whole before a shorter one inside it)."""
    return list(_terms(query))


@lru_cache(maxsize=256)
def _terms(query: str) -> tuple[str, ...]:
    # Kept per query: every result of a search reads the same terms (and the API's server sees a query again).
    terms = {word.lower() for word in _WORD.findall(query) if len(word) > 1 and word.lower() not in _STOPWORDS}
    return tuple(sorted(terms, key=lambda term: (-len(term), term)))


@lru_cache(maxsize=256)
def terms_pattern(query: str) -> re.Pattern[str] | None:
    """One pattern for every word of the text that starts with a query word (case-insensitive); None without any."""
    terms = query_terms(query)
    if not terms:
        return None
    return re.compile(r"\b(" + "|".join(re.escape(term) for term in terms) + r")\w*", re.IGNORECASE)


def snippet_window(text: str, query: str, *, width: int) -> str:
    """``width`` characters of ``text`` (whitespace collapsed) starting a little before the first query word, cut at
    whole words, with an ellipsis where text was left out; the start of the text when no query word is in it."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    positions = [lowered.find(term) for term in _terms(query) if term in lowered]
    start = max(0, min(positions) - width // 4) if positions else 0
    if start > 0:
        start = flat.find(" ", start) + 1 or start
    end = start + width
    piece = flat[start:end]
    if end < len(flat):
        piece = piece.rsplit(" ", 1)[0] + "…"
    return ("…" if start > 0 else "") + piece


def highlight_spans(text: str, query: str) -> list[tuple[int, int]]:
    """Where the query's words are in ``text``: (start, end) character offsets in order, the words that
    ``terms_pattern`` marks, for a client that styles them itself (the API's ``highlights``)."""
    pattern = terms_pattern(query)
    return [] if pattern is None else [match.span() for match in pattern.finditer(text)]


def snippet_and_highlights(text: str, query: str) -> tuple[str, list[tuple[int, int]]]:
    """A result's ``snippet`` (``SNIPPET_CHARS`` around the query's words) and its ``highlights`` (where those
    words are in it): what the API answers and ``ferret search --json`` prints."""
    snippet = snippet_window(text, query, width=SNIPPET_CHARS)
    return snippet, highlight_spans(snippet, query)
