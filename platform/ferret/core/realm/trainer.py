"""The REALM pre-training loop (Guu et al. 2020, §2-3): retrieve, marginalise, back-propagate into both models.

Per step: the masked sentences are embedded by the current query tower; the newest complete index version (possibly
a few refreshes stale) gives each its top k passages outside its own document (§3.4, trivial retrievals excluded);
p(z|x) is recomputed over those k and the null document with the current parameters; the reader scores
p(y|z,x) for each; the loss is the negative marginal log-likelihood (``utility.realm_loss``). Every
``refresh_every`` steps a snapshot of the document tower goes to the asynchronous refresher.

The loop needs no database: it gets passages and masked sentences, a refresh store and a run folder, so the
same code runs in a Ferret job and in the GPU benchmark script. It checkpoints every ``checkpoint_every`` steps
(atomically: write, then rename) and resumes from the last checkpoint when started again on the same folder; the
retrieval utility on the held-out sentences picks the saved retriever (``best/``).

Example:
    >>> result = RealmTrainer(config, base_dir, data, store, run_dir).run()
    >>> result.best_dir  # a sentence-transformers folder
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ferret.core.errors import InvalidInputError
from ferret.core.realm.config import RealmConfig
from ferret.core.realm.ict import ict_warmup
from ferret.core.realm.masking import CorpusPassage, MaskedSentence, check_enough_passages
from ferret.core.realm.reader import KnowledgeAugmentedEncoder, MaskedInput, mlm_warmup
from ferret.core.realm.refresh import IndexRefresher, IndexView, RefreshStore
from ferret.core.realm.retriever import KnowledgeRetriever, snapshot_embedder
from ferret.core.realm.utility import (
    UtilityReport,
    marginal_log_likelihood,
    realm_loss,
    retrieval_utility,
)

logger = logging.getLogger(__name__)

Progress = Callable[[str, float, dict[str, Any]], None]
"""(activity, fraction done, counts); may raise to stop the run (a job's cancel)."""


@dataclass(frozen=True)
class RealmData:
    passages: list[CorpusPassage]
    train: list[MaskedSentence]
    held_out: list[MaskedSentence]


@dataclass
class RealmResult:
    steps: int
    k: int
    best_step: int
    best_utility: float
    best_dir: str
    utility: list[dict[str, float | int]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    staleness_mean: float = 0.0
    staleness_max: int = 0
    refreshes: int = 0
    failed_refreshes: int = 0
    warmup: dict[str, Any] = field(default_factory=dict)
    resumed_from: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quiet(activity: str, fraction: float, counts: dict[str, Any]) -> None:
    """The default progress: report nothing."""


class RealmTrainer:
    def __init__(
        self,
        config: RealmConfig,
        base_path: str | Path,
        data: RealmData,
        store: RefreshStore,
        run_dir: Path,
        *,
        progress: Progress = _quiet,
        time_budget_s: float | None = None,
    ) -> None:
        """``time_budget_s``: stop after the first step that ends past this many seconds from ``run``'s start,
        measuring and checkpointing there as at the last step (a benchmark on a leased GPU, where the step time
        under contention is not known in advance)."""
        self.config = config
        self.time_budget_s = time_budget_s
        self.base_path = str(base_path)
        self.data = data
        self.store = store
        self.run_dir = Path(run_dir)
        self.progress = progress
        self.device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.k = config.resolved_k(self.device)
        self.passages = {p.passage_id: p for p in data.passages}
        per_document: dict[int, int] = defaultdict(int)
        for p in data.passages:
            per_document[p.document_id] += 1
        self._search_depth = self.k + max(per_document.values(), default=0)

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    # -- setup -------------------------------------------------------------------------------------------------
    def _models(self) -> tuple[KnowledgeRetriever, KnowledgeAugmentedEncoder, dict[str, Any] | None]:
        from sentence_transformers import SentenceTransformer

        config = self.config
        torch.manual_seed(config.seed)
        model = SentenceTransformer(self.base_path, device=self.device, local_files_only=True)
        saved = torch.load(self.checkpoint_path, weights_only=False) if self.checkpoint_path.exists() else None
        warmup: dict[str, Any] = {}
        if saved is None and config.ict_warmup_steps > 0:
            self.progress("ICT warm start", 0.0, {})
            warmup["ict"] = asdict(
                ict_warmup(
                    model,
                    self.data.passages,
                    steps=config.ict_warmup_steps,
                    batch_size=config.warmup_batch_size,
                    seed=config.seed,
                )
            )
        retriever = KnowledgeRetriever(
            model,
            freeze_doc_tower=config.freeze_doc_tower,
            scale=config.scale,
            max_query_tokens=config.max_query_tokens,
            max_passage_tokens=config.max_passage_tokens,
        )
        reader = KnowledgeAugmentedEncoder.build(
            self.base_path, device=self.device, max_query_tokens=config.max_query_tokens
        )
        if saved is None and config.mlm_warmup_steps > 0:
            self.progress("MLM warm-up of the reader", 0.0, {})
            texts = [p.text for p in self.data.passages]
            report = mlm_warmup(
                reader, texts, steps=config.mlm_warmup_steps, batch_size=config.warmup_batch_size, seed=config.seed
            )
            warmup["mlm"] = asdict(report)
        if saved is not None:
            retriever.load_state_dict(saved["retriever"])
            reader.model.load_state_dict(saved["reader"])
        else:
            saved = {"warmup": warmup}
        return retriever, reader, saved

    def _save_checkpoint(self, state: dict[str, Any]) -> None:
        """Write beside the old checkpoint, then rename: a kill mid-write leaves the previous one intact."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_suffix(f".tmp{os.getpid()}")
        torch.save(state, tmp)
        os.replace(tmp, self.checkpoint_path)

    # -- one batch ---------------------------------------------------------------------------------------------
    def _candidates(
        self, retriever: KnowledgeRetriever, refresher: IndexRefresher, sentences: Sequence[MaskedSentence]
    ) -> tuple[list[list[str]], IndexView]:
        """The top k passages of each sentence from the current index version, its own document excluded."""
        with torch.no_grad():
            vectors = retriever.embed_queries([s.masked_text for s in sentences]).cpu().numpy()
        ranked, view = refresher.search(vectors.astype(np.float32), self._search_depth)
        candidates = []
        for sentence, ids in zip(sentences, ranked, strict=True):
            kept = [pid for pid in ids if self.passages[pid].document_id != sentence.document_id][: self.k]
            if len(kept) < self.k:
                raise RuntimeError(f"the index returned {len(kept)} passages outside the sentence's document")
            candidates.append([self.passages[pid].text for pid in kept])
        return candidates, view

    def _score(
        self,
        retriever: KnowledgeRetriever,
        reader: KnowledgeAugmentedEncoder,
        refresher: IndexRefresher,
        sentences: Sequence[MaskedSentence],
        inputs: Sequence[MaskedInput],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, IndexView]:
        candidates, view = self._candidates(retriever, refresher, sentences)
        logits = retriever.logits([s.masked_text for s in sentences], candidates)
        with_null: list[list[str | None]] = [[*row, None] for row in candidates]
        reader_ll = reader.log_likelihood(inputs, with_null)
        counts = torch.tensor([len(i.targets) for i in inputs], device=reader_ll.device, dtype=reader_ll.dtype)
        return logits.to(reader_ll.device), reader_ll, counts, view

    def evaluate(
        self,
        retriever: KnowledgeRetriever,
        reader: KnowledgeAugmentedEncoder,
        refresher: IndexRefresher,
        held_out: Sequence[tuple[MaskedSentence, MaskedInput]],
        step: int,
    ) -> UtilityReport:
        """RU of the passage the current retriever ranks first among the k (§4.5), and the marginal likelihood."""
        retriever.train(False)
        reader.model.eval()
        utilities, marginals, index_step = [], [], step
        with torch.no_grad():
            for start in range(0, len(held_out), 16):
                chunk = held_out[start : start + 16]
                logits, reader_ll, counts, view = self._score(
                    retriever, reader, refresher, [s for s, _ in chunk], [i for _, i in chunk]
                )
                index_step = view.step
                best = logits[:, :-1].argmax(dim=1)
                rows = torch.arange(len(chunk), device=reader_ll.device)
                top_and_null = torch.stack([reader_ll[rows, best], reader_ll[:, -1]], dim=1)
                utilities.append(retrieval_utility(top_and_null, counts))
                marginals.append(marginal_log_likelihood(logits, reader_ll) / counts.clamp(min=1))
        utility = torch.cat(utilities)
        return UtilityReport(
            step=step,
            retrieval_utility=float(utility.mean()),
            marginal_log_likelihood=float(torch.cat(marginals).mean()),
            helped=float((utility > 0).float().mean()),
            sentences=len(utility),
            index_step=index_step,
        )

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> RealmResult:
        config = self.config
        started = time.monotonic()
        check_enough_passages(self.data.passages, self.k)
        retriever, reader, saved = self._models()
        assert saved is not None
        start = int(saved.get("step", 0))
        optimizer = torch.optim.AdamW(
            [
                {"params": retriever.parameters(), "lr": config.retriever_learning_rate},
                {"params": list(reader.model.parameters()), "lr": config.reader_learning_rate},
            ]
        )
        if "optimizer" in saved:
            optimizer.load_state_dict(saved["optimizer"])
        history: list[dict[str, float | int]] = list(saved.get("utility", []))
        losses: list[float] = list(saved.get("losses", []))
        staleness: list[int] = list(saved.get("staleness", []))
        best = dict(saved.get("best", {"step": -1, "utility": float("-inf")}))
        best_dir = self.run_dir / "best"

        def encoded(sentences: Sequence[MaskedSentence]) -> list[tuple[MaskedSentence, MaskedInput]]:
            pairs = zip(sentences, reader.encode_sentences(sentences), strict=True)
            return [(s, i) for s, i in pairs if i.targets]

        train = encoded(self.data.train)
        held_out = encoded(self.data.held_out[: config.max_held_out])
        if not train or not held_out:
            raise InvalidInputError("Too few masked sentences to train and measure REALM; ingest more documents.")
        refresher = IndexRefresher(
            self.store,
            self.data.passages,
            snapshot_embedder(retriever.doc_tower, max_tokens=config.max_passage_tokens),
        )

        def checkpoint(step: int) -> None:
            self._save_checkpoint(
                {
                    "step": step,
                    "retriever": retriever.state_dict(),
                    "reader": reader.model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "utility": history,
                    "losses": losses,
                    "staleness": staleness,
                    "best": best,
                    "warmup": saved.get("warmup", {}),
                }
            )

        def measure(step: int) -> None:
            report = self.evaluate(retriever, reader, refresher, held_out, step)
            history.append(report.as_dict())
            if report.retrieval_utility > best["utility"]:
                best.update(step=step, utility=report.retrieval_utility)
                retriever.save(best_dir)

        try:
            self.progress("building the first index", 0.0, {})
            refresher.build_now(retriever.doc_snapshot(), start)
            if start == 0:
                if saved.get("warmup"):
                    checkpoint(0)  # the warm-ups are not repeated after a kill
                measure(0)
            for step in range(start, config.steps):
                rng = random.Random(config.seed * 1_000_003 + step)  # the same batches after a resume
                batch = [train[rng.randrange(len(train))] for _ in range(min(config.batch_size, len(train)))]
                retriever.train(True)
                reader.model.train()
                logits, reader_ll, counts, view = self._score(
                    retriever, reader, refresher, [s for s, _ in batch], [i for _, i in batch]
                )
                loss = realm_loss(logits, reader_ll, counts)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                done = step + 1
                out_of_time = self.time_budget_s is not None and time.monotonic() - started > self.time_budget_s
                last = done == config.steps or out_of_time
                losses.append(round(float(loss.detach()), 5))
                staleness.append(step - view.step)
                if done % config.refresh_every == 0 and not last:
                    refresher.submit(retriever.doc_snapshot(), done)
                if done % config.eval_every == 0 or last:
                    measure(done)
                if done % config.checkpoint_every == 0 or last:
                    checkpoint(done)
                self.progress(
                    "REALM pre-training",
                    done / config.steps,
                    {"step": done, "loss": losses[-1], "staleness": staleness[-1], "index_version": view.version},
                )
                if out_of_time:
                    break
        finally:
            refresher.close()
            close = getattr(self.store, "close", None)
            if close is not None:
                close()
        return RealmResult(
            steps=len(losses),
            k=self.k,
            best_step=int(best["step"]),
            best_utility=float(best["utility"]),
            best_dir=str(best_dir),
            utility=history,
            losses=losses,
            staleness_mean=float(np.mean(staleness)) if staleness else 0.0,
            staleness_max=max(staleness, default=0),
            refreshes=len(refresher.log.built),
            failed_refreshes=len(refresher.log.failed),
            warmup=dict(saved.get("warmup", {})),
            resumed_from=start,
        )
