"""Fine-tune a dual encoder on (query, passage) pairs with in-batch softmax negatives (Promptagator §3.3).

sentence-transformers' MultipleNegativesRankingLoss is the softmax over in-batch negatives; the NO_DUPLICATES
batch sampler keeps a passage from appearing twice in a batch (it would be its own false negative). Optional BM25
hard negatives add one mined negative per pair; optional weight averaging with the base model trades a little of
the gain for robustness when the synthetic data is noisy.
"""

from __future__ import annotations

import importlib
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ferret.core.errors import InvalidInputError
from ferret.core.progress import Progress, quiet
from ferret.core.training.config import DualEncoderTrainingConfig, attention_dropout_overrides
from ferret.core.training.cropping import independent_crops
from ferret.core.training.residual import ResidualMarginLoss

logger = logging.getLogger(__name__)

"""(step, max_steps, last loss) after each logged step."""


def _st_module(name: str) -> Any:
    # sentence-transformers 6.2 moved its training modules under ``sentence_transformer``; the GPU machine runs 6.0.
    try:
        return importlib.import_module(f"sentence_transformers.sentence_transformer.{name}")
    except ImportError:
        return importlib.import_module(f"sentence_transformers.{name}")


def _precision_flags(config: DualEncoderTrainingConfig, device: str) -> dict[str, bool]:
    if not device.startswith("cuda") or config.precision == "fp32":
        return {"fp16": False, "bf16": False}
    if config.precision == "bf16" or (config.precision == "auto" and torch.cuda.is_bf16_supported()):
        return {"fp16": False, "bf16": True}
    return {"fp16": True, "bf16": False}


def average_with_base(model: Any, base_path: str, base_weight: float) -> None:
    """In place: every floating parameter becomes (1 - w)·tuned + w·base (WiSE-FT)."""
    from sentence_transformers import SentenceTransformer

    base = SentenceTransformer(base_path, device="cpu", local_files_only=True)
    base_state = base.state_dict()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and name in base_state:
                tensor.mul_(1.0 - base_weight).add_(base_state[name].to(tensor.device, tensor.dtype), alpha=base_weight)


def train_dual_encoder(
    config: DualEncoderTrainingConfig,
    queries: Sequence[str],
    passages: Sequence[str],
    *,
    negatives: Sequence[str] | None = None,
    lexical_gaps: Sequence[float] | None = None,
    corpus: Sequence[str] | None = None,
    progress: Progress = quiet,
) -> Path:
    """Train, save to ``config.output_dir`` and return it. ``queries[i]`` is answered by ``passages[i]``.

    ``lexical_gaps`` (one normalised BM25 gap per negative) switches to the residual objective (CLEAR,
    ``ferret.core.training.residual``). ``corpus`` (passage texts) feeds the optional cropping warm-up
    (``config.cropping_warmup_steps``); ``progress``
    hears ("training", fraction of the steps done) after every step."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    training_args = _st_module("training_args")
    BatchSamplers, SentenceTransformerTrainingArguments = (
        training_args.BatchSamplers,
        training_args.SentenceTransformerTrainingArguments,
    )
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    if len(queries) != len(passages) or (negatives is not None and len(negatives) != len(queries)):
        raise InvalidInputError("Training needs one passage (and one negative, if any) per query.")
    if lexical_gaps is not None and (negatives is None or len(lexical_gaps) != len(negatives)):
        raise InvalidInputError("The residual objective needs one BM25 negative and one BM25 gap per query.")
    distinct = len(set(passages))
    if len(queries) < 2 * min(config.batch_size, 8) or distinct < 2:
        raise InvalidInputError(f"Only {len(queries)} training pairs; generate more queries before training.")
    # The no-duplicates sampler cannot fill a batch with more passages than there are distinct ones.
    batch_size = min(config.batch_size, distinct)
    if batch_size < config.batch_size:
        logger.warning(
            "batch size lowered from %d to %d: only %d distinct passages", config.batch_size, batch_size, distinct
        )
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(config.seed)
    model = SentenceTransformer(
        config.base_model,
        device=device,
        local_files_only=True,
        config_kwargs=attention_dropout_overrides(config.attention_dropout),
    )
    model.max_seq_length = config.max_seq_length
    columns: dict[str, list[Any]] = {"anchor": list(queries), "positive": list(passages)}
    if negatives is not None:
        columns["negative"] = list(negatives)
    if lexical_gaps is not None:
        columns["label"] = [float(gap) for gap in lexical_gaps]  # the trainer hands a "label" column to the loss
    dataset = Dataset.from_dict(columns)
    st_losses = _st_module("losses")
    loss: Any
    if lexical_gaps is not None:
        loss = ResidualMarginLoss(model)
    elif config.loss == "cached_mnrl":
        loss = st_losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=config.mini_batch_size)
    else:
        loss = st_losses.MultipleNegativesRankingLoss(model)

    class _Progress(TrainerCallback):
        """Reports after every step (the job's progress writer throttles), so a cancel lands within one step."""

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            progress("training", state.global_step / max(state.max_steps, 1))

    class _LogRecords(TrainerCallback):
        """The trainer's loss lines as log records (``$FERRET_HOME/logs/ferret.log``), not prints on the console:
        Ferret's own progress line reports the training (issue 11, item 11)."""

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if logs:
                logger.info("training step %d/%d: %s", state.global_step, state.max_steps, logs)

    def fit(data: Any, steps: int, callbacks: list[Any]) -> None:
        with tempfile.TemporaryDirectory(prefix="ferret-train-") as scratch:
            args = SentenceTransformerTrainingArguments(
                output_dir=scratch,
                per_device_train_batch_size=batch_size,
                learning_rate=config.learning_rate,
                max_steps=steps,
                warmup_steps=int(config.warmup_ratio * steps),
                seed=config.seed,
                batch_sampler=BatchSamplers.NO_DUPLICATES,
                save_strategy="no",
                report_to="none",
                logging_steps=max(1, steps // 20),
                dataloader_drop_last=True,
                disable_tqdm=True,
                **_precision_flags(config, device),
            )
            trainer = SentenceTransformerTrainer(
                model=model, args=args, train_dataset=data, loss=loss, callbacks=[*callbacks, _LogRecords()]
            )
            trainer.remove_callback(PrinterCallback)  # disable_tqdm's replacement for the bar prints every log
            trainer.remove_callback(ProgressCallback)
            trainer.train()

    if config.cropping_warmup_steps > 0:
        # Contriever's independent cropping as a label-free warm-up, then the synthetic pairs.
        crops = independent_crops(corpus or [], pairs=config.cropping_warmup_steps * batch_size, seed=config.seed)
        if len(crops) < 2 * batch_size:
            raise InvalidInputError("The cropping warm-up needs corpus passages of at least 16 words.")
        fit(Dataset.from_dict({"anchor": [a for a, _ in crops], "positive": [b for _, b in crops]}),
            config.cropping_warmup_steps, [])  # fmt: skip
    fit(dataset, config.max_steps, [_Progress()])
    if config.base_weight > 0:
        average_with_base(model, config.base_model, config.base_weight)
    output = Path(config.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    model.save(str(output))
    return output
