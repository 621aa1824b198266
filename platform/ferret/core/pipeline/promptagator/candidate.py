"""What a step of the configuration stage proposes (expansion, distillation): a search plan, the task's examples'
ranks under it (out of sample, for the guard), and the evidence its decision is stored with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferret.core.search.configuration import SearchPlan


@dataclass(frozen=True)
class StepCandidate:
    plan: SearchPlan
    example_ranks: tuple[float, ...]
    evidence: dict[str, Any]

    @property
    def kept(self) -> bool:
        """Whether the step's own guard preferred it to the configuration it would change."""
        return bool(self.evidence.get("kept"))
