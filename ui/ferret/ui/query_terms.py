"""The words of a query worth marking in a result, shared by the terminal client and the admin's playground."""

from __future__ import annotations

import re

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
    terms = {word.lower() for word in _WORD.findall(query) if len(word) > 1 and word.lower() not in _STOPWORDS}
    return sorted(terms, key=lambda term: (-len(term), term))
