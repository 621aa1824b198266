"""The passage of its document a synthetic query is trained on: the served passage that BM25 prefers for it.

Why: Ferret serves passages of 128 wordpieces, the length MiniLM was trained on, and scores a document by its best
passage, while the trainer used to read whole documents cut at 256 wordpieces: twice the length the model is served
at, and, for a query about a document's later part, a positive without the answer in it. The generator writes a
query from the words of the document (a small one copies them), so the passage that shares the most of the query's
rare terms is the part it was written from. Ties, and queries that share no term, take the first passage (the title
and the opening, which is what a whole document cut at its start gave before).

Example:
    >>> document = ["Tesla. Nikola Tesla was born in 1856.", "Tesla. He died in 1943."]
    >>> passage_positives(["when did tesla die"], [document])
    ['Tesla. He died in 1943.']
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ferret.core.index.sparse import SparseEncoder


def passage_positives(queries: Sequence[str], passages: Sequence[Sequence[str]]) -> list[str]:
    """For each query, the passage of ``passages[i]`` (its document's, in document order) with the highest BM25
    score; the inverse document frequencies count every passage given. A document of one passage is that passage."""
    if len(queries) != len(passages):
        raise ValueError(f"{len(queries)} queries but {len(passages)} passage lists")
    if any(not texts for texts in passages):
        raise ValueError("every query needs at least one passage of its document")
    distinct = list(dict.fromkeys(text for texts in passages for text in texts if len(texts) > 1))
    if not distinct:
        return [texts[0] for texts in passages]
    lengths = [len(text.split()) for text in distinct]
    encoder = SparseEncoder(avg_len=sum(lengths) / len(lengths))
    weights = {
        text: dict(zip(vector.indices, vector.values, strict=True))
        for text, vector in zip(distinct, encoder.embed_documents(distinct), strict=True)
    }
    frequency = Counter(term for terms in weights.values() for term in terms)
    idf = {term: math.log(1 + (len(distinct) - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
    chosen = []
    for query, texts in zip(queries, passages, strict=True):
        if len(texts) == 1:
            chosen.append(texts[0])
            continue
        terms = set(encoder.embed_query(query).indices)
        scores = [sum(idf[t] * w for t, w in weights[text].items() if t in terms) for text in texts]
        chosen.append(texts[max(range(len(texts)), key=lambda i: (scores[i], -i))])
    return chosen
