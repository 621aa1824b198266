"""Train the dual encoder on what BM25 misses: a margin that grows where BM25 fails (CLEAR, Gao et al. 2020).

Ferret always fuses the dense ranking with BM25, so the dense model is most useful where BM25 is wrong. CLEAR
("Complementing Lexical Retrieval with Semantic Residual Embedding", Gao et al. 2020, §3.2) trains the embedding
model with a pairwise hinge whose margin depends on the lexical model: for a query q, its positive d+ and a BM25
negative d-, ``m(q, d+, d-) = c - λ · (s_lex(q, d+) - s_lex(q, d-))``. When BM25 already ranks d+ far above d-, the
margin shrinks and the pair teaches little; when BM25 ranks d- above d+ (a lexical miss), the margin grows. Here the
BM25 gap is divided by the query's best BM25 score, so ``λ`` means the same on every corpus, and the hinge is added
to the in-batch softmax loss (Promptagator §3.3) rather than replacing it, so the small synthetic sets still get
their in-batch negatives.

Example:
    >>> loss = ResidualMarginLoss(model, margin=0.3, lexical_weight=0.3)   # dataset columns: anchor, positive,
    >>> # negative, label (the normalised BM25 gap of each triple, from ``bm25_residual_negatives``)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

DEFAULT_MARGIN = 0.3
DEFAULT_LEXICAL_WEIGHT = 0.3


class ResidualMarginLoss(nn.Module):
    """Softmax over in-batch (and the mined) negatives plus CLEAR's lexical-residual hinge on the mined negative.

    Args:
        model: the SentenceTransformer being trained.
        margin: ``c``, the margin of a pair on which BM25 is undecided (gap 0), in cosine units.
        lexical_weight: ``λ``: how much a normalised BM25 gap of 1 lowers (or, negative, raises) the margin.
        scale: the softmax temperature's inverse of the in-batch part (sentence-transformers' default, 20).
    """

    def __init__(
        self,
        model: Any,
        *,
        margin: float = DEFAULT_MARGIN,
        lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
        scale: float = 20.0,
    ) -> None:
        super().__init__()
        self.model = model
        self.margin = margin
        self.lexical_weight = lexical_weight
        self.scale = scale
        self.cross_entropy = nn.CrossEntropyLoss()

    def forward(self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor) -> torch.Tensor:
        anchors, positives, negatives = (
            nn.functional.normalize(self.model(features)["sentence_embedding"], dim=-1)
            for features in sentence_features
        )
        candidates = torch.cat([positives, negatives])  # row i's positive is column i
        scores = anchors @ candidates.T * self.scale
        in_batch = self.cross_entropy(scores, torch.arange(len(anchors), device=scores.device))
        # CLEAR §3.2: m = c - λ·(s_lex(q, d+) - s_lex(q, d-)); hinge on the dense cosine difference.
        margins = (self.margin - self.lexical_weight * labels.to(anchors.dtype)).clamp(min=0.0)
        difference = (anchors * positives).sum(-1) - (anchors * negatives).sum(-1)
        residual = torch.relu(margins - difference).mean()
        return in_batch + residual

    @property
    def citation(self) -> str:
        return "Gao et al. 2020, Complementing Lexical Retrieval with Semantic Residual Embedding (CLEAR)"
