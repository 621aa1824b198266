"""The served passage a synthetic query is trained on (``passage_positives``), and the passages it picks from."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.document import passage_texts_of_documents
from ferret.core.db.models import Document, Passage
from ferret.core.training.positives import passage_positives

FIRST = "Tesla. Nikola Tesla was born in Smiljan in 1856 and moved to New York."
SECOND = "Tesla. In New York he died in a hotel room in January 1943."


def test_the_passage_that_shares_the_querys_terms_is_the_positive() -> None:
    assert passage_positives(["when did tesla die"], [[FIRST, SECOND]]) == [SECOND]
    assert passage_positives(["where was tesla born"], [[FIRST, SECOND]]) == [FIRST]


def test_a_rare_term_outweighs_one_every_passage_has() -> None:
    """'tesla' and 'new york' are in both passages; 'hotel' only in the second."""
    assert passage_positives(["tesla new york hotel"], [[FIRST, SECOND]]) == [SECOND]


def test_ties_and_queries_without_a_shared_term_take_the_first_passage() -> None:
    assert passage_positives(["quantum chromodynamics"], [[FIRST, SECOND]]) == [FIRST]
    assert passage_positives(["tesla"], [["Tesla. Born 1856.", "Tesla. Died 1943."]]) == ["Tesla. Born 1856."]
    assert passage_positives(["anything", "tesla died"], [["only one"], [FIRST, SECOND]]) == ["only one", SECOND]


def test_every_query_needs_its_documents_passages() -> None:
    with pytest.raises(ValueError, match="2 queries but 1 passage lists"):
        passage_positives(["a", "b"], [[FIRST]])
    with pytest.raises(ValueError, match="at least one passage"):
        passage_positives(["a"], [[]])


def test_passages_come_as_indexed_title_first_in_document_order(session: Session) -> None:
    corpus = create_corpus(session, "people")
    windows = ["Nikola Tesla was born in 1856.", "He moved to New York.", "He died in 1943."]
    tesla = Document(
        corpus_id=corpus.id, source="s", external_id="t", title="Tesla", body=" ".join(windows), content_hash="t"
    )
    tesla.passages = [  # stored out of order
        Passage(corpus_id=corpus.id, ordinal=ordinal, text=windows[ordinal], token_count=8) for ordinal in (2, 0, 1)
    ]
    untitled = Document(corpus_id=corpus.id, source="s", external_id="u", title="", body="No title.", content_hash="u")
    untitled.passages = [Passage(corpus_id=corpus.id, ordinal=0, text="No title.", token_count=3)]
    other = Document(
        corpus_id=corpus.id, source="s", external_id="o", title="Other", body="Not asked.", content_hash="o"
    )
    other.passages = [Passage(corpus_id=corpus.id, ordinal=0, text="Not asked.", token_count=3)]
    session.add_all([tesla, untitled, other])
    session.flush()

    texts = passage_texts_of_documents(session, [tesla.id, untitled.id])

    assert texts == {tesla.id: [f"Tesla\n{window}" for window in windows], untitled.id: ["No title."]}
