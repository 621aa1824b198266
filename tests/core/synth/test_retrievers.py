"""Round-trip retrievers over the test corpus: BM25 over documents, the base dense encoder over passages."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus, Document
from ferret.core.encoder.registry import base_model_path, load_encoder
from ferret.core.settings import FerretSettings
from ferret.core.synth.retrievers import BM25Retriever, EncoderRetriever


def _ids(session: Session, corpus: Corpus) -> dict[str, int]:
    return {document.external_id: document.id for document in session.query(Document).filter_by(corpus_id=corpus.id)}


def test_bm25_ranks_documents(session: Session, corpus: Corpus) -> None:
    ids = _ids(session, corpus)
    retriever = BM25Retriever.for_corpus(session, corpus, depth=3)

    rankings = retriever(["largest planet in the solar system", "yeast bread dough", "zzz"])

    assert rankings[0][0] == ids["d3"] and rankings[1][0] == ids["d9"]
    assert all(len(ranking) <= 3 for ranking in rankings)
    assert rankings[2] == []
    assert retriever([]) == []


@pytest.mark.slow
def test_dense_encoder_ranks_documents_by_their_best_passage(
    session: Session, corpus: Corpus, settings: FerretSettings
) -> None:
    ids = _ids(session, corpus)
    encoder = load_encoder(base_model_path(settings), settings)
    retriever = EncoderRetriever.for_corpus(session, corpus, encoder, depth=5)

    rankings = retriever(["which planet is the biggest", "how do birds that cannot fly swim"])

    assert rankings[0][0] == ids["d3"] and rankings[1][0] == ids["d7"]
    assert all(len(ranking) == 5 and len(set(ranking)) == 5 for ranking in rankings)
