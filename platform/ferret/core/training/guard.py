"""The promotion guard: does a trained model beat the active one, judged without test labels?

Evidence Ferret has for a task: its few real examples (query → document), and synthetic queries of documents that
were held out of training (their source document is the label). Both models rank each query's document among
the same sampled sub-corpus (the labelled documents plus random distractors) by exact inner product, so the
comparison costs one embedding of a few thousand passages per model, not a full index build.

Decision: the candidate passes when its held-out MRR@10 is at least the reference's plus ``min_gain``, the gain is
there with 95% confidence (the 5th percentile of a paired bootstrap over the held-out queries is above zero: a
dozen lucky queries must not promote a model), and its MRR@10 on the real examples does not fall by more than
``max_example_drop``. A veto comes first: the candidate must not rank BM25's first document of the held-out
queries much worse than the reference (``max_bm25_drop``). On SciFact that was the only label-free signal with the
sign of the true nDCG difference for every model (benchmarks/RESULTS.md, guard study); the held-out queries alone
scored a model that lost 3.7 nDCG@10 the same as ones that gained. The threshold, set there, also separated the
NFCorpus models (the one worse than base lost 0.015, the better ones gained). The report keeps every number, so a forced
promotion can say what the guard measured.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the encoders are handed in: a module that reads a GuardReport imports no torch (issue 11)
    from ferret.core.encoder.dual_encoder import DualEncoder


@dataclass(frozen=True)
class LabelledQuery:
    text: str
    document_id: int


@dataclass(frozen=True)
class GuardEvidence:
    examples: list[LabelledQuery]
    """The task's real (query, document) examples."""
    held_out: list[LabelledQuery]
    """Filtered synthetic queries of documents excluded from training."""
    documents: dict[int, str]
    """Sub-corpus to rank over: document id → passage text (title + text); holds every labelled document."""
    bm25_labelled: list[LabelledQuery] = field(default_factory=list)
    """The held-out queries labelled with BM25's first document over the whole corpus (an independent retriever)."""

    @classmethod
    def sample(
        cls,
        examples: Sequence[LabelledQuery],
        held_out: Sequence[LabelledQuery],
        corpus: dict[int, str],
        *,
        distractors: int = 2_000,
        seed: int = 13,
        bm25_labelled: Sequence[LabelledQuery] = (),
    ) -> GuardEvidence:
        labelled = {q.document_id for q in [*examples, *held_out, *bm25_labelled]}
        others = sorted(set(corpus) - labelled)
        chosen = random.Random(seed).sample(others, min(distractors, len(others)))
        documents = {doc_id: corpus[doc_id] for doc_id in sorted(labelled | set(chosen)) if doc_id in corpus}
        return cls(list(examples), list(held_out), documents, list(bm25_labelled))


@dataclass(frozen=True)
class GuardScores:
    examples_mrr: float
    held_out_mrr: float
    held_out_recall_at_10: float
    bm25_agreement_mrr: float = 0.0
    """MRR@10 of BM25's first document for the held-out queries."""


@dataclass(frozen=True)
class GuardReport:
    candidate: GuardScores
    reference: GuardScores
    passed: bool
    reason: str
    examples: int
    held_out: int
    documents: int
    held_out_gain_low: float = 0.0
    """5th percentile of the candidate's held-out MRR@10 gain over paired bootstrap resamples of the queries."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GuardReport:
        """A stored report (``as_dict``, kept beside the model version and in the pipeline state) back."""
        return cls(
            candidate=GuardScores(**data["candidate"]),
            reference=GuardScores(**data["reference"]),
            passed=bool(data["passed"]),
            reason=str(data["reason"]),
            examples=int(data["examples"]),
            held_out=int(data["held_out"]),
            documents=int(data["documents"]),
            held_out_gain_low=float(data.get("held_out_gain_low", 0.0)),
        )


def bootstrap_low(differences: np.ndarray, *, rounds: int = 2_000, seed: int = 13) -> float:
    """5th percentile of the mean of ``differences`` over bootstrap resamples (paired: one difference per query)."""
    if len(differences) == 0:
        return 0.0
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, len(differences), size=(rounds, len(differences)))
    return float(np.percentile(differences[samples].mean(axis=1), 5))


def _reciprocal_ranks(encoder: DualEncoder, evidence: GuardEvidence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reciprocal rank within the top 10 (0 below) of the labelled document of each example, each held-out query
    and each BM25-labelled held-out query."""
    doc_ids = list(evidence.documents)
    position = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    matrix = encoder.encode_passages([evidence.documents[d] for d in doc_ids])

    def ranks(queries: Sequence[LabelledQuery]) -> np.ndarray:
        if not queries:
            return np.zeros(0)
        scores = encoder.encode_queries([q.text for q in queries]) @ matrix.T
        gold = scores[np.arange(len(queries)), [position[q.document_id] for q in queries]]
        return (scores > gold[:, None]).sum(axis=1) + 1  # 1 = the labelled document ranks first

    def reciprocal(r: np.ndarray) -> np.ndarray:
        return np.where(r <= 10, 1.0 / np.maximum(r, 1), 0.0)

    return (
        reciprocal(ranks(evidence.examples)),
        reciprocal(ranks(evidence.held_out)),
        reciprocal(ranks(evidence.bm25_labelled)),
    )


def _scores(examples: np.ndarray, held: np.ndarray, bm25: np.ndarray) -> GuardScores:
    return GuardScores(
        examples_mrr=float(examples.mean()) if len(examples) else 0.0,
        held_out_mrr=float(held.mean()) if len(held) else 0.0,
        held_out_recall_at_10=float(np.mean(held > 0)) if len(held) else 0.0,
        bm25_agreement_mrr=float(bm25.mean()) if len(bm25) else 0.0,
    )


TOO_FEW_HELD_OUT_REMEDY = (
    "generate more queries (for more documents, or up to 8 per document: generation.queries_per_doc) or promote by hand"
)
"""What a task whose evidence is too thin can do: a small corpus has no more documents to generate for."""


def run_guard(
    candidate: DualEncoder,
    reference: DualEncoder,
    evidence: GuardEvidence,
    *,
    min_gain: float = 0.005,
    max_example_drop: float = 0.0,
    min_held_out: int = 50,
    max_bm25_drop: float = 0.01,
) -> GuardReport:
    """``min_held_out``: below this many held-out queries the estimate is noise (measured: a dozen queries passed a
    model that lost 0.4 nDCG@10 on NFCorpus), so the guard refuses and says why; a forced promotion still works."""
    if not evidence.held_out and not evidence.examples:
        raise ValueError("the guard needs examples or held-out queries")
    new_examples, new_held, new_bm25 = _reciprocal_ranks(candidate, evidence)
    old_examples, old_held, old_bm25 = _reciprocal_ranks(reference, evidence)
    new, old = _scores(new_examples, new_held, new_bm25), _scores(old_examples, old_held, old_bm25)
    low = bootstrap_low(new_held - old_held)
    if len(evidence.held_out) < min_held_out:
        passed, reason = (
            False,
            (
                f"only {len(evidence.held_out)} held-out queries (at least {min_held_out} are needed to promote "
                f"automatically); {TOO_FEW_HELD_OUT_REMEDY}"
            ),
        )
    elif evidence.bm25_labelled and new.bm25_agreement_mrr < old.bm25_agreement_mrr - max_bm25_drop:
        passed, reason = (
            False,
            (
                f"it agrees less with BM25: MRR@10 of BM25's first document for the held-out queries fell from "
                f"{old.bm25_agreement_mrr:.3f} to {new.bm25_agreement_mrr:.3f} (more than {max_bm25_drop})"
            ),
        )
    elif new.held_out_mrr < old.held_out_mrr + min_gain:
        passed, reason = (
            False,
            (
                f"held-out MRR@10 {new.held_out_mrr:.3f} does not beat the active model's {old.held_out_mrr:.3f} "
                f"by {min_gain}"
            ),
        )
    elif low <= 0:
        passed, reason = (
            False,
            (
                f"held-out MRR@10 {old.held_out_mrr:.3f} → {new.held_out_mrr:.3f}, but the gain is not sure: its 5th "
                f"percentile over bootstrap resamples is {low:+.3f}"
            ),
        )
    elif new.examples_mrr < old.examples_mrr - max_example_drop:
        passed, reason = (
            False,
            (f"MRR@10 on the task's examples fell from {old.examples_mrr:.3f} to {new.examples_mrr:.3f}"),
        )
    else:
        passed, reason = (
            True,
            (
                f"held-out MRR@10 {old.held_out_mrr:.3f} → {new.held_out_mrr:.3f}, "
                f"examples {old.examples_mrr:.3f} → {new.examples_mrr:.3f}"
            ),
        )
    return GuardReport(
        new, old, passed, reason, len(evidence.examples), len(evidence.held_out), len(evidence.documents), low
    )
