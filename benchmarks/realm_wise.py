"""The WiSE-FT weight of a REALM retriever, chosen by held-out retrieval utility (issue 13), not by test labels.

``ferret realm pretrain`` averages the RU-chosen checkpoint with the base model at a fixed share (0.5). Here each
share of the REALM weights (1, 0.75, 0.5, 0.25, and 0: the base model itself) is measured the way the checkpoint
was chosen: a fresh exact index of the corpus embedded by the interpolated document tower, the trained reader
(the run's last checkpoint), and RU = log p(y|top z, x) − log p(y|∅, x) on the held-out masked sentences
(Guu et al. 2020, §4.5). The share with the highest RU wins; share 0 gives the base retriever's RU with the same
reader, the comparison "REALM beats base on RU" asks for.

A frozen document tower (``freeze_doc_tower``) stays the base model on the passage side: only the query tower is
interpolated, and passages are embedded by the base model, as in training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHARES = (1.0, 0.75, 0.5, 0.25, 0.0)
"""Shares of the REALM-trained weights (the rest is the base model's); 0 is the base model."""


def choose_share(trainer: Any, best_dir: str, base_dir: str, out: Path, name: str) -> dict[str, Any]:
    """Save one model folder per share (``out/<name>_w<share>``), measure each one's held-out RU, and return
    ``{"shares": {share: RU}, "chosen": share, "dirs": {share: folder}}``."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.realm.reader import KnowledgeAugmentedEncoder
    from ferret.core.realm.refresh import IndexRefresher, MatrixRefreshStore
    from ferret.core.realm.retriever import KnowledgeRetriever, snapshot_embedder
    from ferret.core.training.dual_encoder_trainer import average_with_base

    config = trainer.config
    device = trainer.device
    reader = KnowledgeAugmentedEncoder.build(base_dir, device=device, max_query_tokens=config.max_query_tokens)
    saved = torch.load(trainer.checkpoint_path, weights_only=False, map_location=device)
    reader.model.load_state_dict(saved["reader"])
    sentences = trainer.data.held_out[: config.max_held_out]
    pairs = [(s, i) for s, i in zip(sentences, reader.encode_sentences(sentences), strict=True) if i.targets]
    base_docs = SentenceTransformer(base_dir, device=device, local_files_only=True) if config.freeze_doc_tower else None
    shares: dict[str, float] = {}
    dirs: dict[str, str] = {}
    for share in SHARES:
        folder = out / f"{name}_w{share:g}"
        model = SentenceTransformer(best_dir if share > 0 else base_dir, device=device, local_files_only=True)
        if 0 < share < 1:
            average_with_base(model, base_dir, 1.0 - share)
        model.save(str(folder))
        retriever = KnowledgeRetriever(
            model, max_query_tokens=config.max_query_tokens, max_passage_tokens=config.max_passage_tokens
        )
        if base_docs is not None:
            retriever.doc_tower = base_docs
        refresher = IndexRefresher(
            MatrixRefreshStore(),
            trainer.data.passages,
            snapshot_embedder(retriever.doc_tower, max_tokens=config.max_passage_tokens),
        )
        try:
            refresher.build_now(retriever.doc_snapshot(), 0)
            report = trainer.evaluate(retriever, reader, refresher, pairs, 0)
        finally:
            refresher.close()
        shares[f"{share:g}"] = round(report.retrieval_utility, 5)
        dirs[f"{share:g}"] = str(folder)
        del model, retriever
        torch.cuda.empty_cache() if device.startswith("cuda") else None
    chosen = max((s for s in shares if s != "0"), key=lambda s: shares[s])
    return {"shares": shares, "chosen": chosen, "dirs": dirs}
