"""Fusion of dense and BM25 candidates: reciprocal rank (RRF) or a convex combination of normalised scores.

Bruch, Gai and Ingber (2023), "An Analysis of Fusion Functions for Hybrid Retrieval" (ACM TOIS), find that a
convex combination ``α·φ(dense) + (1−α)·φ(bm25)`` of normalised scores beats RRF in and out of domain once α is
tuned, and that a handful of labelled queries is enough to tune it (their §5, sample efficiency). RRF throws the
scores away and keeps ranks; a convex combination keeps how far apart the candidates are, which is what a trained
retriever changes. Normalisation φ is per query over that query's first-stage candidates (§4.1):

- ``minmax``: (s − min) / (max − min) over the retrieved candidates;
- ``tmm`` (theoretical min-max, their TM2C2): (s − m) / (max − m) with m the score's theoretical minimum (−1 for a
  cosine, 0 for BM25), so one outlier low score does not stretch the scale.

A candidate that only one retriever returned gets the other list's lowest retrieved score when that list was cut at
the prefetch depth: its true score is at most that (it was not retrieved), and the floor of the scale (0) would
punish it for the depth of the prefetch. A list shorter than the depth was not cut: it holds every point that scores
at all (BM25 returns only passages sharing a query term), so a candidate missing from it gets the floor of the scale.
Without that, a one-word query whose term occurs in three passages gave every dense-only candidate nearly the BM25
share of the best of them (the third's score, 0.96 of the first's), which undid the weight α. 166 of NFCorpus's 323
test queries get fewer BM25 passages than they ask for; its best α read 35.2 nDCG@10 before and 36.4 after
(benchmarks/RESULTS.md, issue 12, nineteenth session).
Equal fused scores are ordered by point id, so the same query always gives the same results.

The untrained default (``DEFAULT_FUSION``) is the convex combination at α=0.8 with ``tmm``, not RRF. It was read on
the labels of three collections that no goal is measured on (nDCG@10 of the base model and BM25, benchmarks/RESULTS.md,
issue 12, twentieth and twenty-third sessions): SQuAD dev (1,500 of its queries), SciFact train (809), NFCorpus dev
(324). Over passages of 288 wordpieces α=0.7 was the best weight (RRF → α=0.7: 85.8 → 90.0 on all of SQuAD dev,
71.0 → 73.8, 33.0 → 33.3). New corpora are cut into passages of 128 (``ferret.core.corpus.chunking``), where dense
search alone is stronger (SciFact train 66.5 → 69.3), and there α=0.8 is the best weight on SciFact (73.9 against
73.2 at 0.7) and NFCorpus (34.1 against 33.3) and within 0.2 of the best on SQuAD (90.5 against 90.6); its mean
over the three (66.2) is the highest of the four pairs of passage length and α (66.0 for 288 and α=0.8, 65.9 for
288 and α=0.7, 65.7 for 128 and α=0.7). Under ``tmm`` a cosine's scale starts at −1, so the candidates' dense scores
span a small part of it and BM25 keeps a real share at α=0.8, even where BM25 is the stronger retriever (SQuAD).
A task's evidence moves α only when it is sure (``ferret.core.search.tuning``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ferret.core.errors import InvalidInputError
from ferret.core.index.types import SearchHit

FusionMethod = Literal["rrf", "convex"]
Normalisation = Literal["minmax", "tmm"]
FUSION_METHODS: tuple[FusionMethod, ...] = ("rrf", "convex")
NORMALISATIONS: tuple[Normalisation, ...] = ("minmax", "tmm")
_THEORETICAL_MIN = {"dense": -1.0, "sparse": 0.0}


@dataclass(frozen=True)
class Fusion:
    """How hybrid search merges its two candidate lists. ``weight`` is α, the dense share of a convex combination
    (1 = dense only, 0 = BM25 only); RRF ignores it."""

    method: FusionMethod = "rrf"
    weight: float = 0.5
    normalisation: Normalisation = "tmm"

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise InvalidInputError(f"Fusion method {self.method!r} is not one of {', '.join(FUSION_METHODS)}.")
        if self.normalisation not in NORMALISATIONS:
            raise InvalidInputError(f"Normalisation {self.normalisation!r} is not one of {', '.join(NORMALISATIONS)}.")
        if not 0.0 <= self.weight <= 1.0:
            raise InvalidInputError(f"The fusion weight must be between 0 and 1, not {self.weight}.")

    def describe(self) -> str:
        if self.method == "rrf":
            return "rrf"
        return f"convex α={self.weight:.2f} ({self.normalisation})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fusion:
        return cls(
            method=data.get("method", "rrf"),
            weight=float(data.get("weight", 0.5)),
            normalisation=data.get("normalisation", "tmm"),
        )


RRF = Fusion()
DEFAULT_FUSION = Fusion("convex", 0.8, "tmm")
"""What hybrid search fuses with when no search configuration says otherwise (module docstring)."""


def normalised(hits: Sequence[SearchHit], kind: str, normalisation: Normalisation) -> dict[str, float]:
    """Point id → normalised score of one candidate list (Bruch et al. §4.1)."""
    if not hits:
        return {}
    scores = [hit.score for hit in hits]
    high = max(scores)
    low = min(scores) if normalisation == "minmax" else min(_THEORETICAL_MIN[kind], min(scores))
    span = high - low
    if span <= 0:
        return {hit.id: 1.0 for hit in hits}
    return {hit.id: (hit.score - low) / span for hit in hits}


def _floor(scores: dict[str, float], depth: int | None) -> float:
    """The normalised score of a candidate missing from a list: the list's lowest when the list was cut at ``depth``
    (or the depth is unknown), the scale's floor when it holds fewer (module docstring)."""
    if depth is not None and len(scores) < depth:
        return 0.0
    return min(scores.values(), default=0.0)


def convex_fuse(
    dense: Sequence[SearchHit],
    sparse: Sequence[SearchHit],
    *,
    weight: float,
    normalisation: Normalisation,
    depth: int | None = None,
    limit: int | None = None,
) -> list[SearchHit]:
    """Every candidate of either list (the best ``limit`` of them), scored α·φ(dense) + (1−α)·φ(bm25), best first,
    ties by point id. ``depth`` is how many hits each list was asked for: a shorter list is complete (module
    docstring)."""
    dense_norm = normalised(dense, "dense", normalisation)
    sparse_norm = normalised(sparse, "sparse", normalisation)
    dense_floor = _floor(dense_norm, depth)
    sparse_floor = _floor(sparse_norm, depth)
    payloads = {hit.id: hit.payload for hit in [*sparse, *dense]}
    scores = {
        point: weight * dense_norm.get(point, dense_floor) + (1.0 - weight) * sparse_norm.get(point, sparse_floor)
        for point in payloads
    }
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [SearchHit(point, score, payloads[point]) for point, score in ranked[:limit]]


def rrf_fuse(
    dense: Sequence[SearchHit], sparse: Sequence[SearchHit], *, k: int = 60, limit: int | None = None
) -> list[SearchHit]:
    """Reciprocal rank fusion (Cormack et al. 2009): Σ 1/(k + rank); ties by point id. Rank counts from 0, as
    Qdrant's RRF does, so hybrid scores read as they did when Qdrant fused them (the best possible is 2/k).

    With ``limit``, only the best ``limit`` become hits: a search keeps 10 of about 200 candidates, and building
    them all was 8% of the API server's samples holding the GIL at 32 clients (benchmarks/RESULTS.md, issue 16)."""
    scores: dict[str, float] = {}
    payloads: dict[str, dict[str, Any]] = {}
    for hits in (dense, sparse):
        for rank, hit in enumerate(hits):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            payloads.setdefault(hit.id, hit.payload)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [SearchHit(point, score, payloads[point]) for point, score in ranked[:limit]]


def fuse(
    dense: Sequence[SearchHit],
    sparse: Sequence[SearchHit],
    fusion: Fusion,
    *,
    limit: int,
    rrf_k: int = 60,
    depth: int | None = None,
) -> list[SearchHit]:
    """The fused list of ``fusion``, ``limit`` long; ``depth`` is how many hits each list was asked for."""
    if fusion.method == "rrf":
        return rrf_fuse(dense, sparse, k=rrf_k, limit=limit)
    return convex_fuse(
        dense, sparse, weight=fusion.weight, normalisation=fusion.normalisation, depth=depth, limit=limit
    )
