"""Choose a search configuration's free settings (fusion weight α, reranker weight) from the task's own evidence.

Evidence is label-free or few-shot only: the task's real examples (query → document) and synthetic queries of
documents held out of training (their source document is the label). Bruch et al. (2023, §5) show that the convex
combination's α is sample-efficient: a few dozen labelled queries place it near its optimum. Each candidate setting
is scored by MRR@10 of the labelled document over the whole index; the examples and the synthetic queries count as
two halves of the objective (eight real queries must not drown in two hundred generated ones, nor the reverse).

α is read off a smoothed curve (the mean of each grid point and its neighbours), so one lucky query does not pick an
extreme weight, and another weight replaces the default fusion (``DEFAULT_FUSION``, convex α=0.8) only when it scores
better on the same evidence with the guard's confidence: the 5th percentile of the objective's gain over paired
bootstrap resamples, drawn within each half (``objective_low``), is above zero. The examples' part of that gain is
measured out of sample: each example is ranked under the weight chosen without it (leave-one-out), since a weight
chosen on eight queries and checked on the same eight looks better than it is. On NFCorpus, 8 one-label examples
preferred dense alone (α=1) by 0.025 MRR, which lost 2.7 nDCG@10 on the test queries; later, with held-out synthetic
queries too, the evidence called α=1 sure and it lost 3.2, so the grid stops short of either end (``ALPHAS``). With
too little evidence nothing is tuned, and the reason says so. RRF is scored too, for reference
(``FusionChoice.scores["rrf"]``), but is not a candidate: on the labels of three collections it scores under the
default (``ferret.core.search.fusion``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ferret.core.corpus.chunking import passage_text
from ferret.core.index.types import SearchHit, SearchRequest
from ferret.core.rerank.cross_encoder import CrossScorer, fused_scores
from ferret.core.search.configuration import SearchPlan
from ferret.core.search.fusion import DEFAULT_FUSION, RRF, Fusion, fuse
from ferret.core.search.searcher import Searcher, dedupe_by_document
from ferret.core.training.guard import LabelledQuery

ALPHAS = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""The weights tuning may choose: 0.1 to 0.9. Hybrid search keeps both signals; dense alone (α=1) and BM25 alone
(α=0) are the other search modes, not a weight a few dozen label-free queries may turn hybrid search into. On
NFCorpus, 8 examples and 32 held-out synthetic queries chose α=1 with the gain 'sure' (5th percentile +0.002), which
lost 3.2 nDCG@10 on the test queries (benchmarks/RESULTS.md, thirty-third session)."""
REFERENCE_ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))
"""The whole range, 0 to 1, for the benchmarks' reference curve on test labels (``eval.configs.fusion_curve``)."""
MIN_TUNING_QUERIES = 6
"""Below this many labelled queries (examples + held-out synthetic) the fusion stays the default: an α read off fewer
queries is mostly noise; a task has 2 to 8 examples, so a task with 6 or more can tune α without any LLM."""


@dataclass(frozen=True)
class Evidence:
    examples: list[LabelledQuery] = field(default_factory=list)
    synthetic: list[LabelledQuery] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.examples) + len(self.synthetic)

    def all(self) -> list[LabelledQuery]:
        return [*self.examples, *self.synthetic]


def reciprocal_rank(ranked_documents: Sequence[int], document_id: int, k: int = 10) -> float:
    for rank, found in enumerate(ranked_documents[:k], start=1):
        if found == document_id:
            return 1.0 / rank
    return 0.0


def objective(reciprocal: np.ndarray, evidence: Evidence) -> float:
    """Mean of the examples' MRR@10 and the synthetic queries' MRR@10 (either alone when the other is empty)."""
    parts = []
    if evidence.examples:
        parts.append(float(reciprocal[: len(evidence.examples)].mean()))
    if evidence.synthetic:
        parts.append(float(reciprocal[len(evidence.examples) :].mean()))
    return float(np.mean(parts)) if parts else 0.0


def objective_low(differences: np.ndarray, examples: int, *, rounds: int = 2_000, seed: int = 13) -> float:
    """5th percentile of the objective's gain (``objective`` of the per-query ``differences``, the first ``examples``
    of them the examples' half) over bootstrap resamples drawn within each half, so that eight examples keep their
    half of the weight in every resample. With one half empty this is ``bootstrap_low`` of the other."""
    parts = [part for part in (differences[:examples], differences[examples:]) if len(part)]
    if not parts:
        return 0.0
    rng = np.random.default_rng(seed)
    means = [part[rng.integers(0, len(part), size=(rounds, len(part)))].mean(axis=1) for part in parts]
    return float(np.percentile(np.mean(means, axis=0), 5))


def objectives_without(ranks: Sequence[np.ndarray], evidence: Evidence, left_out: int | None) -> list[float]:
    """``objective`` of each per-query ranks vector on ``evidence`` without its example ``left_out`` (None: all)."""
    keep = np.ones(evidence.size, dtype=bool)
    if left_out is not None:
        keep[left_out] = False
    part = Evidence(evidence.examples[: len(evidence.examples) - (left_out is not None)], evidence.synthetic)
    return [objective(r[keep], part) for r in ranks]


def plan_reciprocal_ranks(
    searcher: Searcher, corpus_name: str, plan: SearchPlan, queries: Sequence[LabelledQuery], *, batch: int = 64
) -> np.ndarray:
    """Reciprocal rank within the top 10 of each query's labelled document, searched with ``plan``."""
    ranks: list[float] = []
    for start in range(0, len(queries), batch):
        part = queries[start : start + batch]
        found = searcher.search_many(corpus_name, [q.text for q in part], k=10, mode="hybrid", plan=plan)
        ranks.extend(
            reciprocal_rank([r.document_id for r in results], q.document_id)
            for q, results in zip(part, found, strict=True)
        )
    return np.array(ranks, dtype=np.float64)


@dataclass(frozen=True)
class FusionChoice:
    fusion: Fusion
    reason: str
    scores: dict[str, float] = field(default_factory=dict)
    """Objective of RRF (a reference) and of every α on the grid (and the examples' MRR@10 out of sample when another
    α than the default's was chosen)."""
    queries: int = 0
    example_ranks: tuple[float, ...] = ()
    """Reciprocal rank of each example under the weight chosen without it (empty when the default is kept): what the
    configuration guard reads for the examples, instead of ranks the weight was fitted to."""
    objective: float | None = None
    """The evidence's objective under the fusion chosen, each example ranked out of sample (the default's own when
    the default is kept); None when there was too little evidence to tune on. What retrievers are compared by."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "fusion": self.fusion.to_json(), "reason": self.reason, "scores": self.scores, "queries": self.queries,
            "example_ranks": list(self.example_ranks), "objective": self.objective,
        }  # fmt: skip


def candidate_lists(
    searcher: Searcher, plan: SearchPlan, queries: Sequence[str], *, k: int = 10
) -> tuple[list[tuple[list[SearchHit], list[SearchHit]]], int]:
    """(dense, BM25) first-stage candidates of each query, fetched once as deep as ``search_many(k=k)`` fetches them
    (so that fusing them offline for every setting gives what searching would), and that depth."""
    requests = searcher.requests(plan.model_path, queries, k=k, mode="hybrid")
    depth = requests[0].candidates if requests else 0
    batch: list[SearchRequest] = []
    for request in requests:
        batch.append(replace(request, mode="dense", limit=depth))
        batch.append(replace(request, mode="sparse", limit=depth))
    answers = searcher.backend.search_batch(plan.collection, batch) if batch else []
    return [(answers[2 * i], answers[2 * i + 1]) for i in range(len(requests))], depth


def _convex(normalisation: str) -> list[Fusion]:
    return [Fusion("convex", alpha, normalisation) for alpha in ALPHAS]  # type: ignore[arg-type]


def choose_fusion(
    searcher: Searcher,
    plan: SearchPlan,
    evidence: Evidence,
    *,
    normalisation: str = "tmm",
    min_queries: int = MIN_TUNING_QUERIES,
    default: Fusion = DEFAULT_FUSION,
    status: Callable[[str], None] = lambda message: None,
) -> FusionChoice:
    """The default fusion, or the convex combination with the α the evidence is sure of (module docstring)."""
    if evidence.size < min_queries:
        return FusionChoice(
            default,
            f"fusion not tuned: {evidence.size} labelled queries (examples + held-out synthetic), "
            f"at least {min_queries} are needed; the default ({default.describe()}) kept",
            queries=evidence.size,
        )
    queries = evidence.all()
    lists, depth = candidate_lists(searcher, plan, [q.text for q in queries])  # the top 10's depth: 100
    status(f"fusion: {len(queries)} queries, {len(ALPHAS)} weights")

    def reciprocal(fusion: Fusion) -> np.ndarray:
        return np.array(
            [
                reciprocal_rank(
                    [
                        r.document_id
                        for r in dedupe_by_document(fuse(dense, sparse, fusion, limit=100, depth=depth), 10)
                    ],
                    q.document_id,
                )
                for q, (dense, sparse) in zip(queries, lists, strict=True)
            ]
        )

    grid = _convex(normalisation)
    convex = [reciprocal(fusion) for fusion in grid]
    default_ranks = convex[grid.index(default)] if default in grid else reciprocal(default)
    choice = fusion_from_ranks(default_ranks, convex, evidence, normalisation, default=default)
    return replace(choice, scores={"rrf": objective(reciprocal(RRF), evidence), **choice.scores})


def fusion_from_ranks(
    default_ranks: np.ndarray,
    ranks: Sequence[np.ndarray],
    evidence: Evidence,
    normalisation: str = "tmm",
    *,
    default: Fusion = DEFAULT_FUSION,
) -> FusionChoice:
    """The decision of ``choose_fusion`` from per-query reciprocal ranks (the evidence's order) under the ``default``
    fusion and under the convex combination at each α of ``ALPHAS``."""
    queries = evidence.size
    convex = _convex(normalisation)
    n = len(evidence.examples)
    incumbent = f"the default's ({default.describe()})"

    def select(left_out: int | None) -> tuple[int, list[float], float]:
        """(α's index on the grid, or -1 when the default stays; the objective over the grid; the default's
        objective) chosen on the evidence without example ``left_out``."""
        kept, *curve = objectives_without([default_ranks, *ranks], evidence, left_out)
        smoothed = [float(np.mean(curve[max(0, i - 1) : i + 2])) for i in range(len(curve))]
        best = int(np.argmax(smoothed))
        return (best if curve[best] > kept and convex[best] != default else -1), curve, kept

    def ranks_of(chosen: int) -> np.ndarray:
        return ranks[chosen] if chosen >= 0 else default_ranks

    chosen, curve, kept = select(None)
    scores = {f"{alpha:.1f}": value for alpha, value in zip(ALPHAS, curve, strict=True)}
    if chosen < 0:
        best = int(np.argmax(curve))
        return FusionChoice(
            default, f"default kept: the best convex weight α={ALPHAS[best]:.1f} scores {curve[best]:.3f}, no more "
            f"than {incumbent} {kept:.3f}", scores, queries, objective=kept,
        )  # fmt: skip
    # each example ranked under the weight chosen without it: the tuning's gain on the examples, out of sample
    outside = np.array([ranks_of(select(i)[0])[i] for i in range(n)])
    measured = np.concatenate([outside, ranks[chosen][n:]])
    scores["examples out of sample"] = float(outside.mean()) if n else 0.0
    low = objective_low(measured - default_ranks, n)
    alpha, value = ALPHAS[chosen], curve[chosen]
    outside_note = f", examples ranked out of sample {outside.mean():.3f}" if n else ""
    if low <= 0:
        return FusionChoice(
            default, f"default kept: convex α={alpha:.1f} scores {value:.3f} against {incumbent} {kept:.3f}, but the "
            f"gain is not sure (5th percentile over bootstrap resamples {low:+.3f}{outside_note})", scores, queries,
            objective=kept,
        )  # fmt: skip
    return FusionChoice(
        convex[chosen], f"convex α={alpha:.1f}: {value:.3f} against {incumbent} {kept:.3f} on {queries} queries "
        f"(5th percentile of the gain {low:+.3f}{outside_note})", scores, queries, tuple(map(float, outside)),
        objective(measured, evidence),
    )  # fmt: skip


RERANK_WEIGHTS = (0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class RerankChoice:
    weight: float
    reason: str
    scores: dict[str, float] = field(default_factory=dict)
    example_ranks: tuple[float, ...] = ()
    """Reciprocal rank of each example under the weight chosen without it (the first stage's α as chosen on all
    of the evidence): what the configuration guard reads for the examples."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "reason": self.reason,
            "scores": self.scores,
            "example_ranks": list(self.example_ranks),
        }


def choose_rerank_weight(
    searcher: Searcher,
    corpus_name: str,
    first_stage: SearchPlan,
    reranker: CrossScorer,
    depth: int,
    evidence: Evidence,
    *,
    min_queries: int = MIN_TUNING_QUERIES,
) -> RerankChoice:
    """The share of the cross-encoder in the fused score (``ferret.core.rerank.cross_encoder``), read off the same
    evidence as α: the first stage and the cross-encoder run once per query, the weights are compared offline."""
    if evidence.size < min_queries:
        return RerankChoice(0.5, f"reranker weight not tuned: {evidence.size} labelled queries; 0.5 kept")
    queries = evidence.all()
    found = searcher.search_many(corpus_name, [q.text for q in queries], k=depth, mode="hybrid", plan=first_stage)
    cross = [
        reranker.score(q.text, [passage_text(r.title, r.text) for r in results])
        for q, results in zip(queries, found, strict=True)
    ]
    weights = (0.0, *RERANK_WEIGHTS)
    ranks = []
    for weight in weights:
        reciprocal = []
        for q, results, ce in zip(queries, found, cross, strict=True):
            if len(results) < 2:
                reciprocal.append(reciprocal_rank([r.document_id for r in results], q.document_id))
                continue
            fused = fused_scores(np.array([r.score for r in results]), ce, weight)
            order = sorted(range(len(results)), key=lambda i: (-fused[i], i))
            reciprocal.append(reciprocal_rank([results[i].document_id for i in order], q.document_id))
        ranks.append(np.array(reciprocal))

    def best_of(values: list[float]) -> int:
        """Index in ``weights`` of the best non-zero weight (the smaller on a tie)."""
        return max(range(1, len(weights)), key=lambda i: (values[i], -weights[i]))

    values = objectives_without(ranks, evidence, None)
    scores = {f"{weight:.2f}": value for weight, value in zip(weights, values, strict=True)}
    best = best_of(values)
    outside = tuple(
        float(ranks[best_of(objectives_without(ranks, evidence, i))][i]) for i in range(len(evidence.examples))
    )
    return RerankChoice(
        weights[best],
        f"reranker weight {weights[best]:.2f}: {values[best]:.3f} against {values[0]:.3f} without the reranker "
        f"on {len(queries)} queries",
        scores,
        outside,
    )
