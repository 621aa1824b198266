"""The knowledge retriever p(z|x) of REALM (Guu et al. 2020, §3.1, equation 1), on the base dual encoder.

REALM scores a document by an inner product of two BERT embeddings, f(x, z) = Embed_input(x)ᵀ Embed_doc(z), and
p(z|x) is the softmax of f over the candidates. Here both embeddings are the base MiniLM sentence embedding (mean
pooling, unit length) so the trained retriever stays a drop-in Ferret dual encoder (one model folder that
sentence-transformers loads, that indexes and searches like the base one). Unit vectors give inner products in
[-1, 1], far too flat for a softmax over k candidates, so the logits are scaled by a fixed ``scale`` (20, the
scale sentence-transformers' in-batch softmax loss uses for the same model).

The null document ∅ (§3.4) gets a zero embedding: its logit is 0, a cosine of 0, below almost every retrieved
passage at the start, so the reader first learns from retrieval, and retrieval must earn its weight.

Both towers are one shared model by default (what Ferret serves: one encoder for queries and passages);
``freeze_doc_tower`` keeps a frozen copy as the document tower instead (cheaper: no gradient through the k
passages, and the index stays valid longer, at the cost of adapting only the query side).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


def embed_with_grad(model: Any, texts: Sequence[str], max_tokens: int) -> torch.Tensor:
    """Unit sentence embeddings through a sentence-transformers model's forward pass, so gradients flow (``encode``
    runs without them). sentence-transformers 6.2 renamed ``tokenize`` to ``preprocess``; 6.0 has only the former."""
    model.max_seq_length = max_tokens
    prepare = getattr(model, "preprocess", None) or model.tokenize
    device = next(model.parameters()).device
    features = {name: v.to(device) if isinstance(v, torch.Tensor) else v for name, v in prepare(list(texts)).items()}
    return F.normalize(model(features)["sentence_embedding"].float(), dim=-1)


class KnowledgeRetriever:
    """p(z|x) over a query's retrieved passages plus the null document.

    Example:
        >>> retriever = KnowledgeRetriever.load(base_dir, device="cpu")
        >>> logits = retriever.logits(["who discovered [MASK]?"], [["Marie Curie discovered radium."]])
        >>> logits.shape  # one query, one passage + the null document
        torch.Size([1, 2])
    """

    def __init__(
        self,
        model: Any,
        *,
        freeze_doc_tower: bool = False,
        scale: float = 20.0,
        max_query_tokens: int = 64,
        max_passage_tokens: int = 256,
    ) -> None:
        self.query_tower = model
        self.freeze_doc_tower = freeze_doc_tower
        if freeze_doc_tower:
            self.doc_tower = copy.deepcopy(model)
            for parameter in self.doc_tower.parameters():
                parameter.requires_grad_(False)
            self.doc_tower.eval()
        else:
            self.doc_tower = model
        self.scale = scale
        self.max_query_tokens = max_query_tokens
        self.max_passage_tokens = max_passage_tokens

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu", **options: Any) -> KnowledgeRetriever:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(path), device=device, local_files_only=True)
        return cls(model, **options)

    @property
    def device(self) -> torch.device:
        return next(self.query_tower.parameters()).device

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.query_tower.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        self.query_tower.train(mode)
        if not self.freeze_doc_tower:
            self.doc_tower.train(mode)

    def _embed(self, model: Any, texts: Sequence[str], max_tokens: int) -> torch.Tensor:
        return embed_with_grad(model, texts, max_tokens)

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        return self._embed(self.query_tower, texts, self.max_query_tokens)

    def embed_passages(self, texts: Sequence[str], *, grad: bool = True) -> torch.Tensor:
        if grad and not self.freeze_doc_tower:
            return self._embed(self.doc_tower, texts, self.max_passage_tokens)
        with torch.no_grad():
            return self._embed(self.doc_tower, texts, self.max_passage_tokens)

    def logits(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> torch.Tensor:
        """[batch, k + 1]: scaled inner products with each query's k passages, then the null document (logit 0).

        The passages are embedded here with the *current* parameters (§3.4: the index only chooses the top k;
        p(z|x) is recomputed so the gradient reaches the retriever); every query has the same k."""
        k = len(candidates[0])
        query = self.embed_queries(queries)
        flat = [text for texts in candidates for text in texts]
        passages = self.embed_passages(flat).view(len(queries), k, -1)
        scores = self.scale * torch.einsum("bd,bkd->bk", query, passages)
        return torch.cat([scores, scores.new_zeros(len(queries), 1)], dim=1)

    def doc_snapshot(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the document tower's weights, for the index builder (the trainer keeps training)."""
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.doc_tower.state_dict().items()}

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """Both towers (the same weights twice when shared), so a resumed run restores a frozen tower exactly."""
        return {"query": dict(self.query_tower.state_dict()), "doc": dict(self.doc_tower.state_dict())}

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        self.query_tower.load_state_dict(state["query"])
        if self.freeze_doc_tower:
            self.doc_tower.load_state_dict(state["doc"])

    def save(self, path: str | Path) -> Path:
        """The query tower as a sentence-transformers folder: what Ferret registers and serves."""
        Path(path).mkdir(parents=True, exist_ok=True)
        self.query_tower.save(str(path))
        return Path(path)


def snapshot_embedder(template: Any, *, batch_size: int = 64, max_tokens: int = 256) -> Any:
    """An embedder for the index refresher: its own copy of the document tower (the trainer's keeps changing),
    loaded with each snapshot's weights, encoding passages to unit vectors without gradients."""
    import numpy as np

    model = copy.deepcopy(template)
    model.eval()

    def embed(snapshot: dict[str, torch.Tensor], texts: Sequence[str]) -> np.ndarray:
        model.load_state_dict(snapshot)
        model.max_seq_length = max_tokens
        with torch.inference_mode():
            vectors = model.encode(
                list(texts),
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    return embed
