"""BM25 over raw documents with bm25s, outside Qdrant: English stopwords, Snowball stemmer, title + text.

Production code, not only a yardstick: it ranks for the round-trip filter (``synth.retrievers.BM25Retriever``), mines
hard negatives, labels the guard's BM25 veto queries, and is the evaluation baseline beside every trained model
(EVALUATION.md). It reads the raw documents, not Ferret's passages, and shares no code with the sparse vectors
inside Qdrant, so it stays an independent retriever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import bm25s
import Stemmer


class BM25Ranker:
    def __init__(self, documents: Mapping[str, tuple[str, str]]) -> None:
        """``documents``: doc id -> (title, text)."""
        self.doc_ids = list(documents)
        self._stemmer = Stemmer.Stemmer("english")
        corpus = [f"{title} {text}".strip() for title, text in documents.values()]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)

    def search(self, queries: Sequence[str], k: int = 100) -> list[dict[str, float]]:
        k = min(k, len(self.doc_ids))
        tokens = bm25s.tokenize(list(queries), stopwords="en", stemmer=self._stemmer, show_progress=False)
        results, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=0)
        return [
            {self.doc_ids[int(i)]: float(s) for i, s in zip(row, row_scores, strict=True) if s > 0}
            for row, row_scores in zip(results, scores, strict=True)
        ]
