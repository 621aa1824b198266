"""Retrievers for the round-trip consistency filter: a callable from queries to ranked document ids.

Promptagator (Dai et al. 2022, section 3.2) keeps a synthetic (q, d) only when a retriever ranks d in q's top K.
Any callable of the shape ``ferret.core.synth.filters.Retriever`` plugs in; three come here: BM25 over the
corpus documents, a dense encoder searched exactly over the corpus passages (the base model, or one trained on
the unfiltered pairs, without building an index), and the Searcher over a corpus's index.

Example:
    >>> retriever = BM25Retriever.for_corpus(session, corpus)
    >>> retriever(["largest planet in the solar system"])
    [[3, 1, 5]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.document import iter_passages
from ferret.core.db.models import Corpus, IndexVersion
from ferret.core.db.synthetic import document_texts
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.index.types import SearchMode
from ferret.core.search.bm25_ranker import BM25Ranker
from ferret.core.search.searcher import MAX_K, Searcher
from ferret.core.synth.filters import Retriever

__all__ = ["BM25Retriever", "EncoderRetriever", "Retriever", "SearcherRetriever"]


class BM25Retriever:
    """bm25s over title + text of each document (English stopwords, Snowball stemmer), as the BM25 baseline."""

    def __init__(self, documents: Mapping[int, tuple[str, str]], *, depth: int = 100) -> None:
        """``documents``: document id -> (title, text)."""
        self.depth = depth
        self._bm25 = BM25Ranker({str(document_id): texts for document_id, texts in documents.items()})

    @classmethod
    def for_corpus(cls, session: Session, corpus: Corpus, *, depth: int = 100) -> BM25Retriever:
        return cls(document_texts(session, corpus), depth=depth)

    def __call__(self, queries: list[str]) -> list[list[int]]:
        if not queries:
            return []
        return [[int(document_id) for document_id in ranked] for ranked in self._bm25.search(queries, k=self.depth)]

    def scores(self, queries: list[str]) -> list[dict[int, float]]:
        """The BM25 scores of each query's best ``depth`` documents (the residual objective's lexical scores)."""
        if not queries:
            return []
        return [
            {int(document_id): score for document_id, score in ranked.items()}
            for ranked in self._bm25.search(queries, k=self.depth)
        ]


class EncoderRetriever:
    """Exact dense search with a dual encoder over the corpus passages; a document scores as its best passage."""

    def __init__(
        self,
        encoder: DualEncoder,
        passages: Sequence[tuple[int, str]],
        *,
        depth: int = 100,
        batch_size: int = 64,
    ) -> None:
        """``passages``: (document id, passage text) pairs."""
        self.encoder = encoder
        self.depth = depth
        self.batch_size = batch_size
        self._document_ids = np.array([document_id for document_id, _ in passages], dtype=np.int64)
        self._vectors = encoder.encode_passages([text for _, text in passages], batch_size=batch_size)

    @classmethod
    def for_corpus(
        cls, session: Session, corpus: Corpus, encoder: DualEncoder, *, depth: int = 100
    ) -> EncoderRetriever:
        passages = [
            (document.id, passage_text(document.title, passage.text))
            for batch in iter_passages(session, corpus)
            for passage, document in batch
        ]
        return cls(encoder, passages, depth=depth)

    def __call__(self, queries: list[str]) -> list[list[int]]:
        if not queries or not len(self._document_ids):
            return [[] for _ in queries]
        # Enough passages that, after keeping each document's best one, ``depth`` documents usually remain.
        fetch = min(len(self._document_ids), self.depth * 4)
        rankings: list[list[int]] = []
        for start in range(0, len(queries), 256):
            scores = self.encoder.encode_queries(queries[start : start + 256], batch_size=self.batch_size) @ (
                self._vectors.T
            )
            top = np.argpartition(-scores, fetch - 1, axis=1)[:, :fetch]
            for row, candidates in zip(scores, top, strict=True):
                ordered = candidates[np.argsort(-row[candidates], kind="stable")]
                ranking = list(dict.fromkeys(int(document_id) for document_id in self._document_ids[ordered]))
                rankings.append(ranking[: self.depth])
        return rankings


class SearcherRetriever:
    """The Searcher over a corpus's active (or a given ready) index version."""

    def __init__(
        self,
        searcher: Searcher,
        corpus_name: str,
        *,
        mode: SearchMode = "dense",
        depth: int = 100,
        index_version: IndexVersion | None = None,
        batch_size: int = 256,
    ) -> None:
        self.searcher = searcher
        self.corpus_name = corpus_name
        self.mode: SearchMode = mode
        self.depth = min(depth, MAX_K)
        self.index_version = index_version
        self.batch_size = batch_size

    def __call__(self, queries: list[str]) -> list[list[int]]:
        rankings: list[list[int]] = []
        for start in range(0, len(queries), self.batch_size):
            results = self.searcher.search_many(
                self.corpus_name,
                queries[start : start + self.batch_size],
                k=self.depth,
                mode=self.mode,
                index_version=self.index_version,
            )
            rankings.extend([result.document_id for result in ranked] for ranked in results)
        return rankings
