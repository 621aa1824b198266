"""SQuAD's answer normalisation and exact match (Rajpurkar et al. 2016, the v1.1 evaluation script's rules).

An answer is compared after lower-casing, removing punctuation, the articles a/an/the, and extra whitespace; a
prediction scores 1 when it equals any of the gold answers after normalisation.

Example:
    >>> normalize_answer("The  Denver Broncos!")
    'denver broncos'
    >>> exact_match("denver broncos", ["Denver Broncos", "the Broncos"])
    1.0
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (in the official script's order)."""
    lowered = text.lower()
    no_punctuation = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def exact_match(prediction: str, gold_answers: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0 (SQuAD v1.1 EM)."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in gold_answers))
