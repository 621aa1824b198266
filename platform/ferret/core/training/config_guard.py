"""The promotion guard for search configurations: does a configuration beat the active one, without test labels?

The model guard (``ferret.core.training.guard``) compares two encoders on a sampled sub-corpus. A configuration is
a whole search system (retriever, fusion, reranker), so it is judged by searching: the candidate and the active
configuration run the same labelled queries over the real index and are compared by MRR@10 of the labelled
document. The held-out queries the guard reads are not the ones the fusion weight was tuned on
(``split_evidence``), so a tuned weight cannot pass by fitting its own test.

The rules keep the model guard's: enough held-out queries (below ``min_held_out`` the estimate is noise), a gain of
at least ``min_gain`` whose 5th percentile over paired bootstrap resamples is above zero, and nothing the evidence
calls worse. Which gain: with fewer than ``min_examples`` task examples, the held-out synthetic queries' alone (the
examples can only veto); with more, the tuning's objective, the examples and the held-out queries half each
(``ferret.core.search.tuning.objective``, resampled within each half). Synthetic queries of the task's generator
favour a retriever trained on that generator and cannot see what the real queries gain: on SciFact's 2,000-document
run they passed a trained retriever the test split called a tie (71.9 → 71.8) and refused the examples' fusion that
gained 0.6 (benchmarks/RESULTS.md, issue 12, thirteenth session). Then both halves must hold: the held-out MRR@10
may not fall, nor the examples'. A weight tuned on the examples is judged on their out-of-sample ranks
(``FusionChoice.example_ranks``, leave-one-out), never on the ranks it was fitted to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ferret.core.search.configuration import SearchPlan
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import MIN_TUNING_QUERIES, Evidence, objective, objective_low, plan_reciprocal_ranks
from ferret.core.training.guard import TOO_FEW_HELD_OUT_REMEDY, LabelledQuery, bootstrap_low


def split_evidence(
    examples: Sequence[LabelledQuery], held_out: Sequence[LabelledQuery], *, seed: int = 13
) -> tuple[Evidence, Evidence]:
    """(tuning evidence, guard evidence): the held-out synthetic queries split in two halves by a seeded hash of the
    query; the task's few examples go to both (tuning needs real queries; the guard only checks they get no worse)."""

    def half(query: LabelledQuery) -> int:
        return hashlib.blake2b(f"{seed}:{query.text}".encode(), digest_size=2).digest()[0] & 1

    return (
        Evidence(list(examples), [q for q in held_out if half(q) == 0]),
        Evidence(list(examples), [q for q in held_out if half(q) == 1]),
    )


@dataclass(frozen=True)
class ConfigGuardReport:
    passed: bool
    reason: str
    candidate_held_out_mrr: float
    active_held_out_mrr: float
    candidate_examples_mrr: float
    active_examples_mrr: float
    held_out: int
    examples: int
    held_out_gain_low: float
    """5th percentile of the gain decided on: the held-out queries', or the objective's when ``weighs_examples``."""
    weighs_examples: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _out_of_sample(ranks: np.ndarray, examples: Sequence[float], n: int) -> np.ndarray:
    if not len(examples):
        return ranks
    if len(examples) != n:
        raise ValueError(f"{len(examples)} out-of-sample example ranks for {n} examples")
    return np.concatenate([np.asarray(examples, dtype=np.float64), ranks[n:]])


def judge(
    candidate: np.ndarray,
    active: np.ndarray,
    evidence: Evidence,
    *,
    candidate_examples: Sequence[float] = (),
    active_examples: Sequence[float] = (),
    min_gain: float = 0.005,
    min_held_out: int = 50,
    max_example_drop: float = 0.0,
    min_examples: int = MIN_TUNING_QUERIES,
) -> ConfigGuardReport:
    """The decision from per-query reciprocal ranks (examples first, then the held-out queries) of both sides;
    ``candidate_examples`` (``active_examples``) replaces a side's example ranks with out-of-sample ones."""
    n = len(evidence.examples)
    candidate, active = _out_of_sample(candidate, candidate_examples, n), _out_of_sample(active, active_examples, n)
    new_ex, old_ex = candidate[:n], active[:n]
    new_held, old_held = candidate[n:], active[n:]
    new_mrr = float(new_held.mean()) if len(new_held) else 0.0
    old_mrr = float(old_held.mean()) if len(old_held) else 0.0
    new_examples = float(new_ex.mean()) if n else 0.0
    old_examples = float(old_ex.mean()) if n else 0.0
    weighs_examples = n >= min_examples
    if weighs_examples:
        what = "MRR@10 (examples and held-out queries, half each)"
        new_score, old_score = objective(candidate, evidence), objective(active, evidence)
        low = objective_low(candidate - active, n)
    else:
        what, new_score, old_score, low = "held-out MRR@10", new_mrr, old_mrr, bootstrap_low(new_held - old_held)
    held = len(evidence.synthetic)
    if held < min_held_out:
        passed, reason = False, (
            f"only {held} held-out queries (at least {min_held_out} are needed to promote automatically); "
            f"{TOO_FEW_HELD_OUT_REMEDY}"
        )  # fmt: skip
    elif new_score < old_score + min_gain:
        passed, reason = False, f"{what} {new_score:.3f} does not beat the active {old_score:.3f} by {min_gain}"
    elif low <= 0:
        passed, reason = False, (
            f"{what} {old_score:.3f} → {new_score:.3f}, but the gain is not sure: its 5th percentile over "
            f"bootstrap resamples is {low:+.3f}"
        )  # fmt: skip
    elif new_mrr < old_mrr:
        passed, reason = False, f"held-out MRR@10 fell from {old_mrr:.3f} to {new_mrr:.3f}"
    elif new_examples < old_examples - max_example_drop:
        passed, reason = False, f"MRR@10 on the task's examples fell from {old_examples:.3f} to {new_examples:.3f}"
    else:
        passed, reason = True, (
            f"{what} {old_score:.3f} → {new_score:.3f} (5th pct of the gain {low:+.3f}); held-out "
            f"{old_mrr:.3f} → {new_mrr:.3f}, examples {old_examples:.3f} → {new_examples:.3f}"
            + (" (out of sample)" if len(candidate_examples) else "")
        )  # fmt: skip
    return ConfigGuardReport(
        passed, reason, new_mrr, old_mrr, new_examples, old_examples, held, n, low, weighs_examples
    )


def run_config_guard(
    searcher: Searcher,
    corpus_name: str,
    candidate: SearchPlan,
    active: SearchPlan,
    evidence: Evidence,
    *,
    candidate_examples: Sequence[float] = (),
    active_examples: Sequence[float] = (),
    **thresholds: Any,
) -> ConfigGuardReport:
    queries = evidence.all()
    return judge(
        plan_reciprocal_ranks(searcher, corpus_name, candidate, queries),
        plan_reciprocal_ranks(searcher, corpus_name, active, queries),
        evidence,
        candidate_examples=candidate_examples,
        active_examples=active_examples,
        **thresholds,
    )
