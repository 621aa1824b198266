"""The knowledge-augmented encoder p(y|z,x) of REALM (Guu et al. 2020, §3.2, equation 2).

A masked-language model reads ``[CLS] x [SEP] z [SEP]`` (x: the masked sentence, z: a retrieved passage, or
nothing for the null document) and predicts the masked wordpieces; p(y|z,x) = Π_j p(y_j|z,x) over the masked
positions. No MLM checkpoint ships as a package here (MODELS.md), so the reader is ``BertForMaskedLM`` on the base
MiniLM weights: the encoder is MiniLM's, the output decoder is tied to the word embeddings, and the transform head
(dense + LayerNorm) is new. :func:`mlm_warmup` trains it with plain MLM on the corpus before REALM starts, so the
first retrieval gradients do not come from a random head.

Example:
    >>> reader = KnowledgeAugmentedEncoder.build(base_dir, device="cpu")
    >>> batch = reader.encode_sentences(examples)
    >>> reader.log_likelihood(batch, [["passage one", "passage two"]] * len(examples)).shape  # k=2 + null
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ferret.core.encoder.new_heads import new_head_expected
from ferret.core.realm.masking import MaskedSentence


@dataclass(frozen=True)
class MaskedInput:
    """A sentence as wordpieces with its masked positions replaced by [MASK]; ``targets`` are (position, id)."""

    ids: list[int]
    targets: list[tuple[int, int]]


@dataclass(frozen=True)
class WarmupReport:
    steps: int
    seconds: float
    first_loss: float
    last_loss: float


class KnowledgeAugmentedEncoder:
    def __init__(self, model: Any, tokenizer: Any, *, max_query_tokens: int = 64, max_tokens: int = 288) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_query_tokens = max_query_tokens
        self.max_tokens = max_tokens

    @classmethod
    def build(cls, base_path: str | Path, *, device: str = "cpu", **options: Any) -> KnowledgeAugmentedEncoder:
        """BertForMaskedLM on the dual encoder's weights; transformers warns that the transform head is new."""
        from transformers import AutoTokenizer, BertForMaskedLM

        with new_head_expected():  # the "newly initialized cls.predictions" warning
            model: Any = BertForMaskedLM.from_pretrained(
                str(base_path), local_files_only=True, tie_word_embeddings=True
            )
        model.tie_weights()
        tokenizer = AutoTokenizer.from_pretrained(str(base_path), local_files_only=True)
        return cls(model.to(device), tokenizer, **options)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sentences(self, examples: Sequence[MaskedSentence]) -> list[MaskedInput]:
        """Every wordpiece overlapping a masked span becomes [MASK]; sentences are cut to ``max_query_tokens``.

        A sentence whose masked span lies past the cut gets no targets; the trainer drops such sentences."""
        encoded = self.tokenizer([e.sentence for e in examples], add_special_tokens=False, return_offsets_mapping=True)
        mask_id = int(self.tokenizer.mask_token_id)
        result = []
        for example, ids, offsets in zip(examples, encoded["input_ids"], encoded["offset_mapping"], strict=True):
            ids = list(ids[: self.max_query_tokens - 2])
            targets = []
            for i, (start, end) in enumerate(offsets[: len(ids)]):
                if any(start < span_end and end > span_start for span_start, span_end in example.spans):
                    targets.append((i + 1, ids[i]))  # +1: [CLS] comes first
                    ids[i] = mask_id
            result.append(MaskedInput(ids, targets))
        return result

    def _pair_batch(self, inputs: Sequence[MaskedInput], passages: Sequence[Sequence[str | None]]) -> dict[str, Any]:
        """Token ids of every (x, z) pair, ``[CLS] x [SEP] z [SEP]`` (``[CLS] x [SEP]`` for the null document)."""
        cls_id, sep_id, pad_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.tokenizer.pad_token_id
        texts = [text for row in passages for text in row if text is not None]
        passage_ids = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else iter([])
        sequences: list[list[int]] = []
        segments: list[list[int]] = []
        for masked, row in zip(inputs, passages, strict=True):
            x = [cls_id, *masked.ids, sep_id]
            for text in row:
                z = [] if text is None else [*list(next(passage_ids))[: max(0, self.max_tokens - len(x) - 1)], sep_id]
                sequences.append(x + z)
                segments.append([0] * len(x) + [1] * len(z))
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        attention = torch.zeros_like(ids)
        for i, (sequence, segment) in enumerate(zip(sequences, segments, strict=True)):
            ids[i, : len(sequence)] = torch.tensor(sequence)
            types[i, : len(segment)] = torch.tensor(segment)
            attention[i, : len(sequence)] = 1
        device = self.device
        return {"input_ids": ids.to(device), "token_type_ids": types.to(device), "attention_mask": attention.to(device)}

    def log_likelihood(self, inputs: Sequence[MaskedInput], passages: Sequence[Sequence[str | None]]) -> torch.Tensor:
        """[batch, candidates]: log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked positions (§3.2); ``None`` in
        ``passages`` is the null document. Only the masked positions go through the output head."""
        candidates = len(passages[0])
        batch = self._pair_batch(inputs, passages)
        hidden = self.model.bert(**batch).last_hidden_state
        rows, positions, labels = [], [], []  # one entry per (sequence, masked position)
        for b, masked in enumerate(inputs):
            for c in range(candidates):
                for position, label in masked.targets:
                    rows.append(b * candidates + c)
                    positions.append(position)
                    labels.append(label)
        selected = hidden[torch.tensor(rows, device=hidden.device), torch.tensor(positions, device=hidden.device)]
        log_probs = torch.log_softmax(self.model.cls(selected).float(), dim=-1)
        token_ll = log_probs.gather(1, torch.tensor(labels, device=hidden.device)[:, None]).squeeze(1)
        total = token_ll.new_zeros(len(inputs) * candidates)
        total = total.index_add(0, torch.tensor(rows, device=hidden.device), token_ll)
        return total.view(len(inputs), candidates)


def mlm_warmup(
    reader: KnowledgeAugmentedEncoder,
    passages: Sequence[str],
    *,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 1e-4,
    max_tokens: int = 128,
    seed: int = 13,
    on_step: Callable[[int, float], None] | None = None,
) -> WarmupReport:
    """Plain MLM on corpus passages (BERT's recipe: 15% of wordpieces, of which 80% [MASK], 10% random, 10% kept),
    to train the new transform head before REALM; returns its timing and first/last loss."""
    started = time.perf_counter()
    if steps <= 0 or not passages:
        return WarmupReport(0, 0.0, 0.0, 0.0)
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    tokenizer, model = reader.tokenizer, reader.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    special = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    model.train()
    first = last = 0.0
    for step in range(steps):
        texts = [passages[rng.randrange(len(passages))] for _ in range(batch_size)]
        batch = tokenizer(texts, truncation=True, max_length=max_tokens, padding=True, return_tensors="pt")
        ids = batch["input_ids"]
        labels = ids.clone()
        candidates = ~torch.isin(ids, torch.tensor(sorted(special)))
        chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & candidates
        labels[~chosen] = -100
        roll = torch.rand(ids.shape, generator=generator)
        ids = ids.masked_fill(chosen & (roll < 0.8), tokenizer.mask_token_id)
        random_ids = torch.randint(len(tokenizer), ids.shape, generator=generator)
        ids = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, ids)
        device = reader.device
        loss = model(
            input_ids=ids.to(device), attention_mask=batch["attention_mask"].to(device), labels=labels.to(device)
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        last = float(loss.detach())
        first = last if step == 0 else first
        if on_step is not None:
            on_step(step + 1, last)
    model.eval()
    return WarmupReport(steps, time.perf_counter() - started, first, last)
