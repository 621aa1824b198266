"""Values that cross the index interface, independent of the Qdrant backend behind it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

import numpy as np

from ferret.core.errors import InvalidInputError

DENSE = "dense"
SPARSE = "bm25"
SearchMode = Literal["dense", "sparse", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("dense", "sparse", "hybrid")


def parse_mode(mode: str | None) -> SearchMode | None:
    """A search mode from user input; ``None`` stays ``None`` (the configured default applies)."""
    if mode is None:
        return None
    for known in SEARCH_MODES:
        if mode == known:
            return known
    raise InvalidInputError(f"Search mode {mode!r} is not one of {', '.join(SEARCH_MODES)}.")


_NO_GROUP = "\x00no-group"
_POINT_NAMESPACE = uuid.UUID("6f1c9d3e-5a0b-4c7e-9b2d-1e8f4a6c3b70")


def point_id(corpus_id: int, passage_id: int) -> str:
    """Deterministic point id (uuid5 of the passage), so a retried build or update never duplicates a point."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{corpus_id}:{passage_id}"))


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class IndexPoint:
    id: str
    dense: np.ndarray
    sparse: SparseVector
    payload: dict[str, Any]


@dataclass(frozen=True)
class SearchRequest:
    """One query against one collection or alias.

    ``acl_groups=None`` means no access filter (an administrator); a list restricts results, inside Qdrant's
    query, to points whose ``acl_groups`` payload shares a group with it.
    """

    limit: int
    mode: SearchMode = "hybrid"
    dense: np.ndarray | None = None
    sparse: SparseVector | None = None
    acl_groups: list[str] | None = None
    filters: dict[str, str | int | list[str] | list[int]] = field(default_factory=dict)
    prefetch_limit: int | None = None
    rrf_k: int = 60
    hnsw_ef: int | None = None
    exact: bool = False
    with_payload: bool = True
    """False: the hits come without payloads; a caller that keeps only some of them reads theirs afterwards with
    :meth:`IndexBackend.payloads` (the searcher's own fusion keeps 10 of 200 candidates)."""

    def __post_init__(self) -> None:
        if self.mode in ("dense", "hybrid") and self.dense is None:
            raise ValueError(f"{self.mode} search needs a dense query vector")
        if self.mode in ("sparse", "hybrid") and self.sparse is None:
            raise ValueError(f"{self.mode} search needs a sparse query vector")

    def conditions(self) -> list[tuple[str, str | int | list[str] | list[int]]]:
        """(payload key, value or any-of list) pairs that must all hold: the filters, then the access filter.

        An empty group list matches nothing (a group no document has), rather than dropping the condition."""
        must = list(self.filters.items())
        if self.acl_groups is not None:
            must.append(("acl_groups", list(self.acl_groups) or [_NO_GROUP]))
        return must

    @property
    def candidates(self) -> int:
        """Depth of each prefetch before fusion."""
        return self.prefetch_limit or max(self.limit, 100)

    @property
    def fetch_limit(self) -> int:
        """Points to ask Qdrant for. In hybrid mode that is every fused candidate: Qdrant leaves the order of equal
        fused scores to a hash map (it changes from one call to the next), so :meth:`hits` breaks ties here. Other
        modes ask for a margin beyond ``limit``, so that which of several equal scores at the cut is kept is decided
        here too (by point id), not by Qdrant."""
        return 2 * self.candidates if self.mode == "hybrid" else self.limit + max(10, self.limit // 10)

    @property
    def payload_after(self) -> bool:
        """Whether the payloads are read after the query, for the ``limit`` kept points only: in hybrid mode the
        query returns every fused candidate (``fetch_limit``, 200 by default) for the tie-break, and reading 200
        passages' payloads to keep 30 cost more than the query itself (benchmarks/RESULTS.md, issue 16)."""
        return self.mode == "hybrid"

    def hits(self, points: Iterable[Any]) -> list[SearchHit]:
        """Qdrant's scored points (Edge's or the client's) as hits, best first, cut to ``limit``. Equal hybrid scores
        come in point-id order, so the same query gives the same results every time: reciprocal-rank scores tie
        often (ranks 1 and 2 fuse to the same score as 2 and 1)."""
        # One pass, each attribute read once: Qdrant Edge builds a new ``uuid.UUID`` (and a new payload dict) on every
        # read of ``id`` (``payload``), and a search converts about 220 points (benchmarks/RESULTS.md, issue 16).
        hits = [SearchHit(str(p.id), p.score, p.payload or {}) for p in points]
        if self.mode != "hybrid":
            return settle_near_ties(hits)[: self.limit]
        return sorted(hits, key=lambda hit: (-hit.score, hit.id))[: self.limit]


NEAR_TIE = 1e-5
"""Scores closer than this (relative) are one score: Qdrant's sparse dot products differ in their last bits from one
build of the same data to the next (the summation order changes; measured up to 4 float32 ulps, 5e-7 relative), and
that noise reordered near-equal BM25 candidates, which moved hybrid nDCG@10 between runs (issue 11, item 14)."""


def settle_near_ties(hits: list[SearchHit]) -> list[SearchHit]:
    """Best first; runs of scores that differ by less than ``NEAR_TIE`` (each from the next) in point-id order.

    A run is cut where two neighbours differ by more than ``NEAR_TIE``; bit-level noise moves such a cut only if a gap
    lies within the noise of the threshold, which is rare, whereas any rounding of the scores has boundaries that the
    noise crosses everywhere. The neighbours are compared in numpy and only the tied runs are sorted again: the
    Python loop over every hit was a tenth of a hybrid search's Python time (issue 16)."""
    ordered = sorted(hits, key=attrgetter("score"), reverse=True)
    if len(ordered) < 2:
        return ordered
    scores = np.fromiter((hit.score for hit in ordered), dtype=np.float64, count=len(ordered))
    higher, lower = scores[:-1], scores[1:]
    tied = (higher - lower) <= NEAR_TIE * np.maximum(np.abs(higher), np.abs(lower))
    if not tied.any():
        return ordered
    # Tied gaps i..j-1 (a run of True) join hits i..j: the edges of the runs, as (start, stop) pairs.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], tied.astype(np.int8), [0])))).tolist()
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        ordered[start : stop + 1] = sorted(ordered[start : stop + 1], key=attrgetter("id"))
    return ordered


def with_payloads(
    hits: list[list[SearchHit]], requests: Sequence[SearchRequest], payloads: dict[str, dict[str, Any]]
) -> list[list[SearchHit]]:
    """The hits of requests whose payloads were read afterwards (:attr:`SearchRequest.payload_after`), with them.

    A point deleted between the query and the read (a concurrent update) has no payload left and is dropped."""
    return [
        [SearchHit(hit.id, hit.score, payloads[hit.id]) for hit in found if hit.id in payloads]
        if request.payload_after
        else found
        for found, request in zip(hits, requests, strict=True)
    ]


def ids_needing_payload(hits: list[list[SearchHit]], requests: Sequence[SearchRequest]) -> list[str]:
    """Distinct ids of the kept hits whose payloads are still to be read, in first-seen order."""
    ids = [hit.id for found, request in zip(hits, requests, strict=True) if request.payload_after for hit in found]
    return list(dict.fromkeys(ids))


@dataclass(slots=True)
class SearchHit:
    """One scored point. Not frozen: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, three times the cost, and a hybrid search builds about 250 hits (issue 16). Treat it as
    a value all the same: code that changes a hit builds a new one."""

    id: str
    score: float
    payload: dict[str, Any]
