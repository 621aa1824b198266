"""Inverse Cloze Task warm start for the retriever (Lee et al. 2019, used by REALM §3.4 "Initial parameters").

A sentence of a passage is the pseudo-query; the passage is its context, with that sentence removed 90% of the time
(so the retriever learns more than word overlap, yet still rewards it sometimes). Contexts of the other pairs in
the batch are the negatives (in-batch softmax), as in ORQA.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ferret.core.realm.masking import CorpusPassage
from ferret.core.realm.retriever import embed_with_grad

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class IctReport:
    steps: int
    seconds: float
    first_loss: float
    last_loss: float


def ict_pairs(
    passages: Sequence[CorpusPassage], count: int, *, seed: int, keep_rate: float = 0.1
) -> list[tuple[str, str]]:
    """(pseudo-query, context) pairs from passages of at least two sentences."""
    rng = random.Random(seed)
    usable = [split for p in passages if len(split := _SENTENCE_END.split(p.text.strip())) >= 2]
    pairs = []
    for _ in range(count if usable else 0):
        sentences = rng.choice(usable)
        i = rng.randrange(len(sentences))
        context = sentences if rng.random() < keep_rate else sentences[:i] + sentences[i + 1 :]
        pairs.append((sentences[i], " ".join(context)))
    return pairs


def ict_warmup(
    model: Any,
    passages: Sequence[CorpusPassage],
    *,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 2e-5,
    scale: float = 20.0,
    max_tokens: int = 256,
    seed: int = 13,
) -> IctReport:
    """Train a sentence-transformers model in place with ICT; returns timing and first/last loss."""
    started = time.perf_counter()
    pairs = ict_pairs(passages, steps * batch_size, seed=seed)
    if steps <= 0 or len(pairs) < batch_size:
        return IctReport(0, 0.0, 0.0, 0.0)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    first = last = 0.0

    def embed(texts: list[str]) -> torch.Tensor:
        return embed_with_grad(model, texts, max_tokens)

    for step in range(steps):
        batch = pairs[step * batch_size : (step + 1) * batch_size]
        queries = embed([q for q, _ in batch])
        contexts = embed([c for _, c in batch])
        scores = scale * queries @ contexts.T
        loss = F.cross_entropy(scores, torch.arange(len(batch), device=device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        last = float(loss.detach())
        first = last if step == 0 else first
    model.eval()
    return IctReport(steps, time.perf_counter() - started, first, last)
