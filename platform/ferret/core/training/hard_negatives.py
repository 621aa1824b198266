"""Hard negatives mined with BM25 for dual-encoder training (Karpukhin et al. 2020, DPR §3.2 and §5.2).

One negative per (query, document) pair: a document BM25 ranks high for the query that is not the query's own. The
very top of the BM25 list is skipped and the negative is drawn at random from the ranks below it, because with
synthetic queries the top BM25 hits are often unlabelled positives (RocketQA, Qu et al. 2021, §3.2: denoised hard
negatives), and a false negative teaches the model the wrong thing.

Example:
    >>> negatives = bm25_hard_negatives(BM25Retriever(documents), pairs, texts)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

Ranker = Callable[[list[str]], list[list[int]]]
"""Queries -> document ids, best first (``BM25Retriever``)."""
Scorer = Callable[[list[str]], list[dict[int, float]]]
"""Queries -> {document id: BM25 score} of the best documents (``BM25Retriever.scores``)."""


def bm25_hard_negatives(
    ranker: Ranker,
    pairs: Sequence[tuple[str, int]],
    texts: Mapping[int, str],
    *,
    skip_top: int = 2,
    pool: int = 20,
    seed: int = 13,
) -> list[str]:
    """The text of one negative document per pair, from BM25 ranks ``skip_top`` .. ``pool`` (not the positive).

    A query whose BM25 list has nothing usable gets a random document of the corpus instead.
    """
    if not pairs:
        return []
    rng = random.Random(seed)
    all_ids = sorted(texts)
    negatives: list[str] = []
    for (_, positive), ranked in zip(pairs, ranker([query for query, _ in pairs]), strict=True):
        candidates = [document_id for document_id in ranked[skip_top:pool] if document_id != positive]
        if not candidates:
            sampled = rng.sample(all_ids, min(5, len(all_ids)))
            candidates = [document_id for document_id in sampled if document_id != positive]
        negatives.append(texts[rng.choice(candidates)] if candidates else texts[positive])
    return negatives


def bm25_residual_negatives(
    scorer: Scorer,
    pairs: Sequence[tuple[str, int]],
    texts: Mapping[int, str],
    *,
    skip_top: int = 2,
    pool: int = 20,
    seed: int = 13,
) -> list[tuple[str, float]]:
    """One BM25 negative per pair, as ``bm25_hard_negatives`` draws it, with the pair's normalised BM25 gap
    ``(s(q, d+) - s(q, d-)) / max_d s(q, d)`` for the residual objective (``ferret.core.training.residual``).

    A positive BM25 does not retrieve scores 0; a gap near 1 means BM25 already gets the pair right, a negative one
    that BM25 prefers the negative (what the dense model should make up for).
    """
    if not pairs:
        return []
    rng = random.Random(seed)
    all_ids = sorted(texts)
    negatives: list[tuple[str, float]] = []
    for (_, positive), scores in zip(pairs, scorer([query for query, _ in pairs]), strict=True):
        ranked = sorted(scores, key=lambda document_id: -scores[document_id])
        candidates = [document_id for document_id in ranked[skip_top:pool] if document_id != positive]
        if not candidates:
            sampled = rng.sample(all_ids, min(5, len(all_ids)))
            candidates = [document_id for document_id in sampled if document_id != positive] or [positive]
        negative = rng.choice(candidates)
        top = max(scores.values(), default=0.0)
        gap = (scores.get(positive, 0.0) - scores.get(negative, 0.0)) / top if top > 0 else 0.0
        negatives.append((texts[negative], gap))
    return negatives
