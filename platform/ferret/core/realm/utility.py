"""The REALM objective and the retrieval utility (Guu et al. 2020, §2.3 and §4.5/Table 3).

Objective, per masked sentence x with targets y: log p(y|x) = log Σ_{z ∈ top-k ∪ {∅}} p(z|x) p(y|z,x), where
p(y|z,x) = Π_j p(y_j|z,x) over the masked wordpieces. The loss divides by the number of masked wordpieces so long
spans do not dominate a batch (a per-token average of the same marginal).

Retrieval utility RU(z|x) = log p(y|z,x) − log p(y|∅,x): how much reading z helps the reader over reading nothing.
Positive means retrieval is useful; REALM's training should push it up (the paper's Table 3 shows it growing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def marginal_log_likelihood(retrieval_logits: torch.Tensor, reader_log_likelihood: torch.Tensor) -> torch.Tensor:
    """[batch]: log Σ_z p(z|x) p(y|z,x), with p(z|x) the softmax of the logits over the candidates (null included)."""
    log_prior = torch.log_softmax(retrieval_logits, dim=-1)
    return torch.logsumexp(log_prior + reader_log_likelihood, dim=-1)


def realm_loss(
    retrieval_logits: torch.Tensor, reader_log_likelihood: torch.Tensor, target_counts: torch.Tensor
) -> torch.Tensor:
    """The negative marginal log-likelihood per masked wordpiece, averaged over the batch."""
    marginal = marginal_log_likelihood(retrieval_logits, reader_log_likelihood)
    return -(marginal / target_counts.clamp(min=1)).mean()


@dataclass(frozen=True)
class UtilityReport:
    """Held-out means: RU of the top retrieved passage, per masked wordpiece; the marginal log-likelihood per
    wordpiece; the share of sentences for which the top passage helps (RU > 0); and the sentences measured."""

    step: int
    retrieval_utility: float
    marginal_log_likelihood: float
    helped: float
    sentences: int
    index_step: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "step": self.step,
            "retrieval_utility": round(self.retrieval_utility, 5),
            "marginal_log_likelihood": round(self.marginal_log_likelihood, 5),
            "helped": round(self.helped, 4),
            "sentences": self.sentences,
            "index_step": self.index_step,
        }


def retrieval_utility(reader_log_likelihood: torch.Tensor, target_counts: torch.Tensor) -> torch.Tensor:
    """[batch]: RU of the first candidate (the top retrieved passage) against the null document (the last
    column), per masked wordpiece."""
    return (reader_log_likelihood[:, 0] - reader_log_likelihood[:, -1]) / target_counts.clamp(min=1)
