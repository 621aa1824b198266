"""Turn passages into index points: dense vector, BM25 sparse vector and the payload search returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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


class PointBuilder:
    def __init__(
        self,
        encoder: DualEncoder,
        sparse: SparseEncoder,
        *,
        batch_size: int = 64,
    ) -> None:
        self.encoder = encoder
        self.sparse = sparse
        self.batch_size = batch_size

    def build(self, rows: Sequence[tuple[Passage, Document]]) -> list[IndexPoint]:
        texts = [passage_text(document.title, passage.text) for passage, document in rows]
        dense = self.encoder.encode_passages(texts, batch_size=self.batch_size)  # prefetched ones from its memo
        sparse = self.sparse.embed_documents(texts)
        return [
            IndexPoint(
                id=point_id(passage.corpus_id, passage.id),
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
