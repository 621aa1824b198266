"""Turn passages into index points: dense vector, BM25 sparse vector and the payload search returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.models import Corpus, Document, Passage
from ferret.core.index.sparse import SparseEncoder
from ferret.core.index.types import IndexPoint, point_id

if TYPE_CHECKING:  # a type only: torch is imported where a model is loaded
    from ferret.core.encoder.dual_encoder import DualEncoder


def sparse_encoder_for(session: Session, corpus: Corpus) -> SparseEncoder:
    """BM25 with the corpus's mean passage length, so length normalization matches the data."""
    mean = session.scalar(select(func.avg(Passage.token_count)).where(Passage.corpus_id == corpus.id))
    return SparseEncoder.for_wordpiece_length(float(mean or 256.0))


@dataclass(frozen=True)
class Expansion:
    """Document expansion for one index build (doc2query--, issue 12 item 6): texts appended to the BM25 text of
    every passage of a document, and where they came from (``source``, stored on the version with the counts)."""

    texts: Mapping[int, Sequence[str]]
    source: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {**self.source, "documents": len(self.texts), "queries": sum(len(t) for t in self.texts.values())}


class PointBuilder:
    def __init__(
        self,
        encoder: DualEncoder,
        sparse: SparseEncoder,
        *,
        batch_size: int = 64,
        expansion: Mapping[int, Sequence[str]] | None = None,
        stored_dense: Callable[[Sequence[str]], Mapping[str, list[float]]] | None = None,
    ) -> None:
        self.encoder = encoder
        self.sparse = sparse
        self.batch_size = batch_size
        self.expansion = expansion or {}
        """Document id → texts appended to each of its passages' BM25 text (doc2query--: the kept synthetic
        queries); the dense vector and the payload's text stay the passage's own."""
        self.stored_dense = stored_dense
        """Point id → the dense vector another version of the same model already holds (a point id names one
        passage's text, so the vector is the one the encoder would give); only the others are encoded."""

    def _dense(self, ids: Sequence[str], texts: Sequence[str]) -> list[np.ndarray]:
        stored = self.stored_dense(ids) if self.stored_dense is not None else {}
        missing = [i for i, point in enumerate(ids) if point not in stored]
        encoded = self.encoder.encode_passages([texts[i] for i in missing], batch_size=self.batch_size)
        fresh = dict(zip(missing, encoded, strict=True))  # prefetched ones come from the encoder's memo
        return [fresh[i] if i in fresh else np.asarray(stored[point], dtype=np.float32) for i, point in enumerate(ids)]

    def build(self, rows: Sequence[tuple[Passage, Document]]) -> list[IndexPoint]:
        texts = [passage_text(document.title, passage.text) for passage, document in rows]
        ids = [point_id(passage.corpus_id, passage.id) for passage, _ in rows]
        dense = self._dense(ids, texts)
        expanded = [" ".join([text, *self.expansion.get(d.id, ())]) for text, (_, d) in zip(texts, rows, strict=True)]
        sparse = self.sparse.embed_documents(expanded)
        return [
            IndexPoint(
                id=ids[i],
                dense=dense[i],
                sparse=sparse[i],
                payload={
                    "passage_id": passage.id,
                    "document_id": document.id,
                    "external_id": document.external_id,
                    "source": document.source,
                    "title": document.title,
                    "text": passage.text,
                    "acl_groups": list(document.acl_groups),
                    "metadata": dict(document.meta),
                },
            )
            for i, (passage, document) in enumerate(rows)
        ]
