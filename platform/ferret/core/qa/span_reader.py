"""The span reader of open-domain QA: BERT start/end logits over a passage (Devlin et al. 2019, §4.2; the reader
REALM fine-tunes for Open-QA, Guu et al. 2020, §3.4 "Open-QA fine-tuning").

No extractive-QA checkpoint ships as a package here (MODELS.md), so the reader is ``BertForQuestionAnswering`` on
the base MiniLM encoder with a new start/end head, fine-tuned on SQuAD-format (question, passage, answer) pairs by
:func:`train_span_reader`. It reads ``[CLS] question [SEP] passage [SEP]``; a passage longer than ``max_tokens``
is read in overlapping windows (``stride`` wordpieces of overlap).

p(span|z,x) = p_start(s) · p_end(e), each a softmax over the window's positions, for spans of at most
``max_answer_tokens`` wordpieces with e ≥ s inside the passage. ``ferret.core.qa.answering`` marginalises these over
the retrieved passages.

Example:
    >>> reader = SpanReader.build(base_dir)
    >>> train_span_reader(reader, examples, steps=200)
    >>> reader.spans("Who won Super Bowl 50?", ["The Denver Broncos won Super Bowl 50."])[0].text
    'Denver Broncos'
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
from ferret.core.errors import InvalidInputError


@dataclass(frozen=True)
class ReadingExample:
    """A SQuAD-style training pair: the answer is ``context[answer_start : answer_start + len(answer)]``."""

    question: str
    context: str
    answer: str
    answer_start: int


@dataclass(frozen=True)
class SpanCandidate:
    passage_index: int
    text: str
    start_char: int
    end_char: int
    log_probability: float
    """log p(span | z, x) inside its passage."""


@dataclass(frozen=True)
class ReaderTrainingReport:
    steps: int
    examples: int
    windows: int
    seconds: float
    first_loss: float
    last_loss: float


class SpanReader:
    def __init__(
        self, model: Any, tokenizer: Any, *, max_tokens: int = 256, stride: int = 64, max_answer_tokens: int = 30
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.stride = stride
        self.max_answer_tokens = max_answer_tokens

    @classmethod
    def build(cls, base_path: str | Path, *, device: str = "cpu", seed: int = 13, **options: Any) -> SpanReader:
        """A new reader on an encoder's weights; transformers warns that the start/end head is new. The new head is
        drawn with ``seed`` (in a forked RNG, leaving the caller's untouched), so the same data trains the same
        reader whatever ran before in the process."""
        from transformers import AutoModelForQuestionAnswering

        with new_head_expected(), torch.random.fork_rng(devices=[]):  # the "newly initialized qa_outputs" warning
            torch.manual_seed(seed)
            model = AutoModelForQuestionAnswering.from_pretrained(str(base_path), local_files_only=True)
        return cls(model.to(device), _tokenizer(base_path), **options)

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu", **options: Any) -> SpanReader:
        """A reader saved by :meth:`save`; a folder without a trained head is refused in one sentence."""
        from transformers import AutoModelForQuestionAnswering

        folder = Path(path)
        if not (folder / "reader.json").exists():
            raise InvalidInputError(f"{folder} is not a trained span reader; train one with `ferret reader train`.")
        model = AutoModelForQuestionAnswering.from_pretrained(str(folder), local_files_only=True)
        model.eval()
        return cls(model.to(device), _tokenizer(folder), **options)

    def save(self, path: str | Path, *, info: dict[str, Any] | None = None) -> Path:
        """The model, its tokenizer and ``reader.json`` (how it was trained), which marks the folder as a reader."""
        import json

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        (folder / "reader.json").write_text(json.dumps(info or {}, indent=2))
        return folder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _windows(self, questions: Sequence[str], contexts: Sequence[str]) -> Any:
        """Tokenised (question, passage window) pairs with character offsets; ``overflow_to_sample_mapping`` maps
        each window to its pair."""
        return self.tokenizer(
            list(questions),
            list(contexts),
            truncation="only_second",
            max_length=self.max_tokens,
            stride=self.stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
            return_tensors="pt",
        )

    def spans(self, question: str, passages: Sequence[str], *, top_n: int = 20) -> list[SpanCandidate]:
        """The ``top_n`` most probable spans of each passage with log p(span|z,x); windows of one passage that
        propose the same span keep its best score."""
        if not passages:
            return []
        windows = self._windows([question] * len(passages), passages)
        owners = windows.pop("overflow_to_sample_mapping").tolist()
        offsets = windows.pop("offset_mapping").tolist()
        self.model.eval()
        with torch.no_grad():
            output = self.model(**{name: value.to(self.device) for name, value in windows.items()})
        start_lp = torch.log_softmax(output.start_logits.float(), dim=-1).cpu()
        end_lp = torch.log_softmax(output.end_logits.float(), dim=-1).cpu()
        best: dict[tuple[int, int, int], SpanCandidate] = {}
        for w, owner in enumerate(owners):
            context = [i for i, sid in enumerate(windows.sequence_ids(w)) if sid == 1]
            if not context:
                continue
            first, last = context[0], context[-1]
            starts = torch.topk(start_lp[w, first : last + 1], min(top_n, last - first + 1)).indices + first
            ends = torch.topk(end_lp[w, first : last + 1], min(top_n, last - first + 1)).indices + first
            for s in starts.tolist():
                for e in ends.tolist():
                    if e < s or e - s + 1 > self.max_answer_tokens:
                        continue
                    start_char, end_char = offsets[w][s][0], offsets[w][e][1]
                    score = float(start_lp[w, s] + end_lp[w, e])
                    key = (owner, start_char, end_char)
                    if key not in best or best[key].log_probability < score:
                        text = passages[owner][start_char:end_char]
                        best[key] = SpanCandidate(owner, text, start_char, end_char, score)
        per_passage: dict[int, list[SpanCandidate]] = {}
        for candidate in best.values():
            per_passage.setdefault(candidate.passage_index, []).append(candidate)
        return [
            candidate
            for index in sorted(per_passage)
            for candidate in sorted(per_passage[index], key=lambda c: -c.log_probability)[:top_n]
        ]


def _tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _labelled_windows(reader: SpanReader, examples: Sequence[ReadingExample]) -> list[dict[str, Any]]:
    """One training window per window that contains the whole answer, with its start/end wordpiece positions."""
    windows = reader._windows([e.question for e in examples], [e.context for e in examples])
    owners = windows["overflow_to_sample_mapping"].tolist()
    result = []
    for w, owner in enumerate(owners):
        example = examples[owner]
        start_char = example.answer_start
        end_char = start_char + len(example.answer)
        sequence_ids = windows.sequence_ids(w)
        offsets = windows["offset_mapping"][w].tolist()
        start = end = None
        for i, (sid, (a, b)) in enumerate(zip(sequence_ids, offsets, strict=True)):
            if sid != 1:
                continue
            if start is None and a <= start_char < b:
                start = i
            if a < end_char <= b:
                end = i
        if start is None or end is None or end < start:
            continue
        length = int(windows["attention_mask"][w].sum())
        result.append(
            {
                "input_ids": windows["input_ids"][w, :length],
                "token_type_ids": windows["token_type_ids"][w, :length],
                "start": start,
                "end": end,
            }
        )
    return result


def train_span_reader(
    reader: SpanReader,
    examples: Sequence[ReadingExample],
    *,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 5e-5,
    seed: int = 13,
    on_step: Callable[[int, float], None] | None = None,
) -> ReaderTrainingReport:
    """Fine-tune on (question, passage, answer) pairs: cross-entropy of the answer's start and end positions
    (BERT's SQuAD recipe, §4.2), AdamW with a linear decay; batches sampled with ``seed``."""
    valid = [e for e in examples if e.context[e.answer_start : e.answer_start + len(e.answer)] == e.answer]
    if not valid:
        raise InvalidInputError("No training pair has its answer at the given position in its passage.")
    if steps < 1:
        raise InvalidInputError("Steps must be at least 1.")
    started = time.perf_counter()
    windows = _labelled_windows(reader, valid)
    if not windows:
        raise InvalidInputError("No answer fits in a reader window; shorten the passages or raise max_tokens.")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = reader.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / steps))
    pad = int(reader.tokenizer.pad_token_id)
    model.train()
    first = last = 0.0
    for step in range(steps):
        batch = [windows[rng.randrange(len(windows))] for _ in range(min(batch_size, len(windows)))]
        width = max(len(item["input_ids"]) for item in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        types = torch.zeros_like(ids)
        attention = torch.zeros_like(ids)
        for i, item in enumerate(batch):
            n = len(item["input_ids"])
            ids[i, :n], types[i, :n], attention[i, :n] = item["input_ids"], item["token_type_ids"], 1
        device = reader.device
        loss = model(
            input_ids=ids.to(device),
            token_type_ids=types.to(device),
            attention_mask=attention.to(device),
            start_positions=torch.tensor([item["start"] for item in batch], device=device),
            end_positions=torch.tensor([item["end"] for item in batch], device=device),
        ).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        last = float(loss.detach())
        first = last if step == 0 else first
        if on_step is not None:
            on_step(step + 1, last)
    model.eval()
    return ReaderTrainingReport(steps, len(valid), len(windows), time.perf_counter() - started, first, last)
