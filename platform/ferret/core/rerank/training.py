"""Train a cross-encoder reranker on the kept synthetic pairs (Promptagator++, Dai et al. 2022 §3.4).

Each training group is a synthetic query, its source document and ``negatives`` documents mined from the hybrid
first stage's top ``mine_depth`` with the first ``skip_top`` ranks skipped: those are often relevant too (a claim has
several supporting abstracts), and training them as negatives teaches the reranker to push good documents down
(the false-negative problem of hard-negative mining, RocketQA, Qu et al. 2021 §4.2). The loss is the listwise
softmax cross-entropy over the group (positive first), as in Promptagator++ and monoBERT's successors.

The model starts from the base MiniLM's transformer with a new one-logit head (no trained cross-encoder ships as a
package; MODELS.md). This module imports only torch, sentence-transformers and numpy at run time, so the GPU
machine can run it on carried files without the rest of Ferret's dependencies.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from ferret.core.encoder.new_heads import new_head_expected
from ferret.core.errors import InvalidInputError
from ferret.core.training.config import attention_dropout_overrides

T = TypeVar("T")

MIN_PAIRS = 200
"""Fewer kept pairs than this train a reranker that is worse than none (noise on a new head); refused."""

MAX_PAIR_TOKENS = 128
"""Query + passage wordpieces a reranker reads, in training and in search. The cost of a pair grows with it: 128
takes 0.56–0.68 of 256's CPU time, and on SciFact's test split (H100 scores of a reranker trained at 256) reading
128 changed the best fused nDCG@10 by −0.2 at depth 10 and +0.5 at depth 20 (benchmarks/RESULTS.md, issue 12,
third session). Training read 256 until the twelfth session; it now reads what search reads, at a third of the
cost of a training step on a CPU (benchmarks/RESULTS.md, issue 12, twelfth session)."""


def epoch_plan(groups: int, batch_size: int, epochs: int, min_steps: int) -> tuple[int, int]:
    """(epochs, optimiser steps): at least ``epochs``, and more until ``min_steps`` steps, since a few hundred
    synthetic queries give few steps an epoch (the reranker's and the distilled encoder's trainers)."""
    per_epoch = max(1, math.ceil(groups / batch_size))
    planned = max(epochs, math.ceil(min_steps / per_epoch))
    return planned, planned * per_epoch


def optimise_in_batches(
    items: Sequence[T],
    loss_of: Callable[[list[T]], Any],
    optimizer: Any,
    parameters: Any,
    rng: random.Random,
    *,
    epochs: int,
    batch_size: int,
    warmup_fraction: float,
    progress: Callable[[float], None],
    after_step: Callable[[int, int], bool] | None = None,
) -> tuple[list[float], float]:
    """The loop the reranker's and the distilled encoder's trainers share: the items shuffled every epoch, one
    optimiser step per batch with clipped gradients, linear warm-up then linear decay; returns losses and seconds.
    ``after_step(step, total)`` runs after each step (1-based) and ends training early by returning False."""
    import torch

    total = epochs * max(1, math.ceil(len(items) / batch_size))
    warmup = max(1, int(total * warmup_fraction))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * max(0.0, (total - step) / max(1, total - warmup))
    )
    parameters = list(parameters)
    losses: list[float] = []
    started = time.perf_counter()
    for _ in range(epochs):
        order = list(range(len(items)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            loss = loss_of([items[i] for i in order[start : start + batch_size]])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(float(loss.item()))
            progress(len(losses) / total)
            if after_step is not None and not after_step(len(losses), total):
                return losses, time.perf_counter() - started
    return losses, time.perf_counter() - started


def loss_report(losses: Sequence[float], seconds: float, *, groups: int, epochs: int, device: str) -> dict[str, Any]:
    """What a training run reports: its size, time and the mean loss of its first, last and every tenth of steps."""
    tenth = max(1, len(losses) // 10)
    return {
        "groups": groups,
        "epochs": epochs,
        "steps": len(losses),
        "seconds": round(seconds, 1),
        "device": device,
        "loss_first": round(sum(losses[:tenth]) / tenth, 4),
        "loss_last": round(sum(losses[-tenth:]) / tenth, 4),
        "loss_by_tenth": [round(sum(losses[j : j + tenth]) / len(losses[j : j + tenth]), 4)
                          for j in range(0, len(losses), tenth)],
    }  # fmt: skip


@dataclass(frozen=True)
class RerankerTrainingConfig:
    negatives: int = 7
    """Negatives per group and step, drawn anew each epoch from the group's mined pool."""
    pool: int = 30
    """Mined negatives kept per group (ranks ``skip_top``..``mine_depth`` of the first stage)."""
    skip_top: int = 3
    mine_depth: int = 50
    epochs: int = 4
    min_steps: int = 600
    """On a GPU, more epochs are run until this many optimiser steps: a new head over a few hundred groups needs
    several hundred steps to leave chance level (99 steps left the loss at 1.88 of ln 8 = 2.08, with the head at the
    body's rate)."""
    cpu_min_steps: int = 0
    """The minimum on a CPU, where a step takes 6-17 s on 2 cores (600 steps: one to three hours): ``epochs``
    epochs alone, with early stopping. On 2 cores, 3 epochs of 795 SciFact groups learned with the head at its own
    rate (held-out MRR 0.29 → 0.77 by step 45 of 150; benchmarks/RESULTS.md, issue 12, fourteenth session)."""
    batch_size: int = 16
    """Groups per step: each group is 1 + ``negatives`` pairs."""
    learning_rate: float = 4e-5
    head_learning_rate: float = 1e-3
    """The one-logit head starts random: at the body's rate it barely moves in a few hundred steps."""
    warmup_fraction: float = 0.1
    max_length: int = MAX_PAIR_TOKENS
    attention_dropout: float | None = 0.0
    """Dropout on the attention probabilities; None keeps the base model's (0.1). Off, as for the dual encoder
    (``DualEncoderTrainingConfig.attention_dropout``): on a CPU it forces the unfused attention path. A step of 16
    groups of 8 pairs at 128 wordpieces took 16.3–20.1 s against 19.9–21.9 s with it on 2 CPU cores."""
    seed: int = 13
    validation_fraction: float = 0.1
    """Share of the groups (by positive document, seeded) kept out of training to choose the checkpoint: trained
    to the end, the reranker memorised 257 groups (loss 0.0004) and lost to the first stage (benchmarks/RESULTS.md,
    issue 12, third session). 0 trains on every group and keeps the last step."""
    evaluations: int = 10
    """How often over the planned steps the held-out groups are scored (and once before the first step)."""
    patience: int = 3
    """Training stops after this many evaluations without a better held-out score."""

    def steps(self, groups: int, device: str = "cuda") -> tuple[int, int]:
        """(epochs, optimiser steps) for ``groups`` usable groups trained on ``device``."""
        minimum = self.cpu_min_steps if device == "cpu" else self.min_steps
        return epoch_plan(groups, self.batch_size, self.epochs, minimum)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrainingGroup:
    query: str
    positive: str
    negatives: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_pair_count(count: int, minimum: int = MIN_PAIRS, *, what: str = "a reranker") -> None:
    if count < minimum:
        raise InvalidInputError(
            f"Only {count} kept synthetic pairs; {what} needs at least {minimum} (generate for more documents)."
        )


def mine_negatives(
    ranked: Sequence[Sequence[int]], positives: Sequence[int], config: RerankerTrainingConfig
) -> list[list[int]]:
    """For each query, up to ``pool`` document ids from its first-stage ranking, ranks ``skip_top``..``mine_depth``
    (0-based), its own document excluded; a seeded sample, so a rerun mines the same ones. Training draws
    ``negatives`` of them per epoch (``train_cross_encoder``)."""
    rng = random.Random(config.seed)
    mined = []
    for ranking, positive in zip(ranked, positives, strict=True):
        pool = [d for d in list(ranking)[config.skip_top : config.mine_depth] if d != positive]
        mined.append(rng.sample(pool, min(max(config.pool, config.negatives), len(pool))))
    return mined


def write_groups(path: Path, groups: Sequence[TrainingGroup]) -> None:
    path.write_text("".join(json.dumps(g.to_json()) + "\n" for g in groups))


def read_groups(path: Path) -> list[TrainingGroup]:
    return [TrainingGroup(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


MIN_VALIDATION_GROUPS = 20
"""Fewer held-out groups than this make the checkpoint a coin toss: every group trains and the last step is kept."""


def split_validation(
    groups: Sequence[TrainingGroup], fraction: float, seed: int
) -> tuple[list[TrainingGroup], list[TrainingGroup]]:
    """(training, held-out) groups: every group of a seeded ``fraction`` of the positive documents is held out, so
    no held-out query's document was seen in training. Fewer than ``MIN_VALIDATION_GROUPS``: (all, none)."""
    documents = sorted({g.positive for g in groups})
    held = set(random.Random(seed).sample(documents, round(len(documents) * max(0.0, fraction))))
    validation = [g for g in groups if g.positive in held]
    if len(validation) < MIN_VALIDATION_GROUPS:
        return list(groups), []
    return [g for g in groups if g.positive not in held], validation


def _sample_negatives(groups: Sequence[TrainingGroup], count: int, rng: random.Random) -> list[list[str]]:
    return [rng.sample(g.negatives, min(count, len(g.negatives))) for g in groups]


def train_cross_encoder(
    groups: Sequence[TrainingGroup],
    base_path: str | Path,
    output: Path,
    config: RerankerTrainingConfig = RerankerTrainingConfig(),
    *,
    device: str | None = None,
    minimum_pairs: int = MIN_PAIRS,
    validation: Sequence[TrainingGroup] | None = None,
    progress: Callable[[float], None] = lambda fraction: None,
) -> dict[str, Any]:
    """Fine-tune ``CrossEncoder(base_path, num_labels=1)`` with the listwise loss and save it to ``output``.

    Each step takes ``batch_size`` groups; a group's logits over (positive, its negatives drawn for this epoch)
    are one softmax whose target is the positive (listwise softmax cross-entropy, Promptagator++ §3.4). The
    head learns at ``head_learning_rate``, the transformer at ``learning_rate``; linear warm-up and decay. A share
    of the positive documents' groups (``validation_fraction``) is held out to choose the checkpoint and stop early
    (``Checkpoint``), unless ``validation`` gives the held-out groups; the report's ``validation`` says what it
    scored. ``minimum_pairs`` exists for tests that overfit a handful of groups."""
    import torch
    from sentence_transformers import CrossEncoder

    check_pair_count(len(groups), minimum_pairs)
    usable = [g for g in groups if g.negatives]
    if not usable:
        raise InvalidInputError("No training group has a mined negative; the first stage returned nothing to mine.")
    if validation is None:
        training, validation = split_validation(usable, config.validation_fraction, config.seed)
        unchecked = f"fewer than {MIN_VALIDATION_GROUPS} held-out groups"
    else:
        training, validation = usable, [g for g in validation if g.negatives]
        unchecked = "no held-out group with a mined negative was given"
    torch.manual_seed(config.seed)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    overrides = attention_dropout_overrides(config.attention_dropout)
    with new_head_expected():  # the one-logit head is new
        model = CrossEncoder(
            str(base_path), num_labels=1, max_length=config.max_length, device=device, config_kwargs=overrides
        )
    network, tokenizer = model.model, model.tokenizer
    network.float().train()
    epochs, _ = config.steps(len(training), device)
    head = [p for n, p in network.named_parameters() if n.startswith("classifier.")]
    body = [p for n, p in network.named_parameters() if not n.startswith("classifier.")]
    optimizer = torch.optim.AdamW(
        [{"params": body, "lr": config.learning_rate}, {"params": head, "lr": config.head_learning_rate}],
        weight_decay=0.01,
    )
    rng = random.Random(config.seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))

    def logits_of(pairs: Sequence[tuple[str, str]]) -> Any:
        inputs = tokenizer(
            [q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
            max_length=config.max_length, return_tensors="pt",
        ).to(device)  # fmt: skip
        with autocast:
            return network(**inputs).logits.float().view(-1)

    def listwise_loss(batch: list[TrainingGroup]) -> Any:
        drawn = _sample_negatives(batch, config.negatives, rng)
        width = min(len(n) for n in drawn) + 1
        pairs = [(g.query, text) for g, n in zip(batch, drawn, strict=True) for text in [g.positive, *n[: width - 1]]]
        logits = logits_of(pairs).view(len(batch), width)
        return torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long, device=device))

    def score_groups(batch: Sequence[TrainingGroup]) -> list[Any]:
        """Per group, the scores of its positive (first) and its first ``negatives`` mined negatives."""
        candidates = [[g.positive, *g.negatives[: config.negatives]] for g in batch]
        logits = logits_of([(g.query, text) for g, texts in zip(batch, candidates, strict=True) for text in texts])
        return list(torch.split(logits, [len(texts) for texts in candidates]))

    checkpoint = Checkpoint(network, validation, score_groups, config, unchecked=unchecked)
    losses, seconds = optimise_in_batches(
        training, listwise_loss, optimizer, network.parameters(), rng,
        epochs=epochs, batch_size=config.batch_size, warmup_fraction=config.warmup_fraction, progress=progress,
        after_step=checkpoint.after_step if validation else None,
    )  # fmt: skip
    checkpoint.restore_best(len(losses))
    network.eval()
    output.mkdir(parents=True, exist_ok=True)
    model.save(str(output))
    return {
        **loss_report(losses, seconds, groups=len(training), epochs=epochs, device=device),
        "chance_loss": round(math.log(config.negatives + 1), 4),
        "validation": checkpoint.report(),
        "config": config.to_json(),
    }


class Checkpoint:
    """Early stopping on held-out groups: their mean reciprocal rank of the positive among it and its first
    ``negatives`` mined negatives, scored before training and ``evaluations`` times over it; the weights of the
    best score are kept and restored at the end, and training stops after ``patience`` scores without a gain."""

    def __init__(
        self,
        network: Any,
        groups: Sequence[TrainingGroup],
        score_groups: Callable[[Sequence[TrainingGroup]], list[Any]],
        config: RerankerTrainingConfig,
        *,
        unchecked: str = "no held-out groups",
    ) -> None:
        self.network, self.groups, self.score_groups, self.config = network, list(groups), score_groups, config
        self.unchecked = unchecked
        self.scores: list[tuple[int, float]] = []
        self.best_step, self.misses = 0, 0
        self.best_state: dict[str, Any] | None = None
        if self.groups:
            self._evaluate(0)

    def _mrr(self) -> float:
        import torch

        self.network.eval()
        reciprocal = []
        with torch.inference_mode():
            for start in range(0, len(self.groups), 16):
                for scores in self.score_groups(self.groups[start : start + 16]):
                    reciprocal.append(1.0 / (1 + int((scores[1:] >= scores[0]).sum())))  # ties count against it
        self.network.train()
        return sum(reciprocal) / len(reciprocal)

    def _evaluate(self, step: int) -> None:
        score = self._mrr()
        if not self.scores or score > max(s for _, s in self.scores):
            self.best_step, self.misses = step, 0
            self.best_state = {k: v.detach().clone() for k, v in self.network.state_dict().items()}
        else:
            self.misses += 1
        self.scores.append((step, round(score, 4)))

    def after_step(self, step: int, total: int) -> bool:
        every = max(1, total // max(1, self.config.evaluations))
        if step % every == 0 or step == total:
            self._evaluate(step)
        return self.misses < self.config.patience

    def restore_best(self, last_step: int) -> None:
        if self.best_state is not None and self.best_step != last_step:
            self.network.load_state_dict(self.best_state)

    def report(self) -> dict[str, Any]:
        if not self.groups:
            return {"groups": 0, "note": f"{self.unchecked}: the last step is kept"}
        return {
            "groups": len(self.groups),
            "documents": len({g.positive for g in self.groups}),
            "mrr_by_step": [list(entry) for entry in self.scores],
            "best_step": self.best_step,
            "stopped_early": self.misses >= self.config.patience,
        }
