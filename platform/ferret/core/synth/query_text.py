"""Text tests shared by generation and the filters: cleaning a raw generation, normalising a query, and telling a
query from a copy of its document.

Overlap is measured on word bigrams, not single words: a good query shares most of its words with its document
by nature (that is why it retrieves it), while a copy shares its word *sequences*.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

from ferret.core.synth.prompt import ZERO_SHOT_INSTRUCTION, one_line

QUOTES = "\"'`“”‘’«»"
_WORD = re.compile(r"\w+")
MIN_COPY_TOKENS = 4
"""A copy is only called one from this many words on: two or three document words make a keyword query."""
MIN_BAG_COPY_TOKENS = 8
"""A query this long whose every word is in its document is the document reshuffled."""


def tokens(text: str) -> list[str]:
    """Lowercased word tokens, punctuation dropped."""
    return _WORD.findall(text.lower())


def normalize(text: str) -> str:
    """The comparison key of a query: lowercase words separated by single spaces (case and punctuation ignored)."""
    return " ".join(tokens(text))


def clean_generation(raw: str, e_query: str) -> str:
    """Strip a generation: one line, a repeated leading ``{e_query}:`` dropped, surrounding quotes removed."""
    text = one_line(raw)
    marker = f"{e_query.lower()}:"
    while text.lower().startswith(marker):
        text = text[len(marker) :].strip()
    while len(text) >= 2 and text[0] in QUOTES and text[-1] in QUOTES:
        text = text[1:-1].strip()
    # A lone quote at either end (the other one cut off by the stop sequence or the token limit).
    if text and text[0] in QUOTES and not any(character in QUOTES for character in text[1:]):
        text = text[1:].strip()
    if text and text[-1] in QUOTES and not any(character in QUOTES for character in text[:-1]):
        text = text[:-1].strip()
    return text


def looks_like_query(text: str, e_doc: str, e_query: str) -> bool:
    """False when the generation is no query: only punctuation, or it wrote a new ``{e_doc}:`` or ``{e_query}:``
    field (the query description no longer precedes the query), or it repeated the zero-shot instruction."""
    if not any(character.isalnum() for character in text):
        return False
    lowered = text.lower()
    if f"{e_doc.lower()}:" in lowered or f"{e_query.lower()}:" in lowered:
        return False
    return normalize(ZERO_SHOT_INSTRUCTION) not in normalize(text)


def longest_common_span(query_tokens: Sequence[str], document_tokens: Sequence[str]) -> int:
    """Length of the longest run of query words that appears contiguously in the document."""
    positions: dict[str, list[int]] = {}
    for position, token in enumerate(document_tokens):
        positions.setdefault(token, []).append(position)
    best = 0
    for start in range(len(query_tokens)):
        if len(query_tokens) - start <= best:
            break
        for position in positions.get(query_tokens[start], ()):
            length = 1
            while (
                start + length < len(query_tokens)
                and position + length < len(document_tokens)
                and query_tokens[start + length] == document_tokens[position + length]
            ):
                length += 1
            best = max(best, length)
    return best


def bigram_overlap(query_tokens: Sequence[str], document_tokens: Sequence[str]) -> float:
    """Share of the query's word bigrams that occur in the document (0 for a query of one word)."""
    query_bigrams = list(pairwise(query_tokens))
    if not query_bigrams:
        return 0.0
    document_bigrams = set(pairwise(document_tokens))
    return sum(bigram in document_bigrams for bigram in query_bigrams) / len(query_bigrams)


def is_verbatim_copy(query: str, document: str) -> bool:
    """The query is a stretch of the document (at least ``MIN_COPY_TOKENS`` words, punctuation and case aside),
    or a long query made only of the document's words."""
    query_tokens, document_tokens = tokens(query), tokens(document)
    if len(query_tokens) < MIN_COPY_TOKENS:
        return False
    if longest_common_span(query_tokens, document_tokens) == len(query_tokens):
        return True
    return len(query_tokens) >= MIN_BAG_COPY_TOKENS and set(query_tokens) <= set(document_tokens)


def is_near_verbatim_copy(
    query: str, document: str, *, max_span_fraction: float = 0.9, max_bigram_overlap: float = 0.8
) -> bool:
    """At least ``max_span_fraction`` of the query's words in one contiguous stretch of the document, or at
    least ``max_bigram_overlap`` of its word bigrams in the document (queries of ``MIN_COPY_TOKENS`` words on)."""
    query_tokens, document_tokens = tokens(query), tokens(document)
    if len(query_tokens) < MIN_COPY_TOKENS:
        return False
    if longest_common_span(query_tokens, document_tokens) >= max_span_fraction * len(query_tokens):
        return True
    return bigram_overlap(query_tokens, document_tokens) >= max_bigram_overlap
