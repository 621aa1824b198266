"""Independent cropping (Contriever, Izacard et al. 2022, §3.1): two random spans of one passage form a positive
pair, the other passages of the batch are negatives. A label-free warm-up that teaches the encoder the corpus's
vocabulary before it sees (noisy) synthetic queries.

Example:
    >>> pairs = independent_crops(["a b c d e f g h i j"] * 4, pairs=2, seed=1)
    >>> len(pairs)
    2
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def _crop(words: list[str], rng: random.Random, min_ratio: float, max_ratio: float) -> str:
    length = max(1, round(len(words) * rng.uniform(min_ratio, max_ratio)))
    start = rng.randrange(0, len(words) - length + 1)
    return " ".join(words[start : start + length])


def independent_crops(
    texts: Sequence[str],
    *,
    pairs: int,
    seed: int = 13,
    min_ratio: float = 0.1,
    max_ratio: float = 0.5,
    min_words: int = 16,
) -> list[tuple[str, str]]:
    """``pairs`` (span, span) pairs, each from a passage drawn at random (without replacement while they last).

    Spans are ``min_ratio`` to ``max_ratio`` of the passage's words, as in Contriever; passages shorter than
    ``min_words`` are skipped (their crops would be a word or two).
    """
    usable = [text.split() for text in texts if len(text.split()) >= min_words]
    if not usable or pairs <= 0:
        return []
    rng = random.Random(seed)
    order: list[int] = []
    result: list[tuple[str, str]] = []
    while len(result) < pairs:
        if not order:
            order = list(range(len(usable)))
            rng.shuffle(order)
        words = usable[order.pop()]
        result.append((_crop(words, rng, min_ratio, max_ratio), _crop(words, rng, min_ratio, max_ratio)))
    return result
