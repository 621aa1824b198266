"""The quickstart's last lines say why search is unchanged when nothing was promoted (issue 12, item 8)."""

from __future__ import annotations

from typing import Any

from ferret.cli.quickstart import unchanged_reasons

FUSION_REASON = (
    "RRF kept: convex α=0.6 scores 0.475 against RRF's 0.442, but the gain is not sure (5th percentile over bootstrap "
    "resamples -0.015, examples ranked out of sample 0.700)"
)
GUARD_REASON = "MRR@10 (examples and held-out queries, half each) 0.407 does not beat the active 0.407 by 0.005"
# The evidence the configure stage stored on a quickstart run (`ferret config show --corpus demo 1`), cut.
EVIDENCE: dict[str, Any] = {
    "fusion": {
        "fusion": {"method": "rrf", "weight": 0.5, "normalisation": "tmm"},
        "reason": FUSION_REASON,
        "scores": {"rrf": 0.4415, "0.6": 0.4753},
    },
    "retriever": "base",
    "guard": {
        "passed": False,
        "reason": GUARD_REASON,
    },
}


def test_the_fusion_choice_and_the_guards_decision_are_the_reasons() -> None:
    assert unchanged_reasons(EVIDENCE) == [
        f"fusion: {FUSION_REASON}",
        f"configuration guard: {GUARD_REASON}",
    ]


def test_a_configuration_without_evidence_gives_no_reasons() -> None:
    assert unchanged_reasons(None) == [] and unchanged_reasons({"guard": "not a record"}) == []
