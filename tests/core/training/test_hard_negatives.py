from ferret.core.synth.retrievers import BM25Retriever
from ferret.core.training.hard_negatives import bm25_hard_negatives

DOCUMENTS = {
    1: ("Penguins", "Penguins live in Antarctica and eat krill."),
    2: ("Antarctic krill", "Krill are eaten by penguins, whales and seals in Antarctica."),
    3: ("Seals", "Seals in Antarctica hunt fish and krill."),
    4: ("Coffee", "Coffee is brewed from roasted beans."),
    5: ("Tea", "Tea has caffeine and is brewed from leaves."),
}
TEXTS = {document_id: f"{title}. {text}" for document_id, (title, text) in DOCUMENTS.items()}


def test_negatives_are_never_the_positive_and_come_from_the_bm25_list() -> None:
    pairs = [("what do penguins in antarctica eat", 1), ("how is coffee brewed", 4)]
    negatives = bm25_hard_negatives(BM25Retriever(DOCUMENTS), pairs, TEXTS, skip_top=0, pool=3)
    assert negatives[0] != TEXTS[1] and negatives[0] in {TEXTS[2], TEXTS[3]}
    assert negatives[1] != TEXTS[4]


def test_skipping_the_top_hits_and_the_fallback() -> None:
    pairs = [("what do penguins in antarctica eat", 1)]
    negatives = bm25_hard_negatives(lambda queries: [[1, 2, 3]], pairs, TEXTS, skip_top=1, pool=2)
    assert negatives == [TEXTS[2]]
    # Nothing usable in the list: a random document that is not the positive.
    (fallback,) = bm25_hard_negatives(lambda queries: [[1]], pairs, TEXTS)
    assert fallback != TEXTS[1]
    assert bm25_hard_negatives(lambda queries: [], [], TEXTS) == []


def test_residual_negatives_carry_the_normalised_bm25_gap() -> None:
    from ferret.core.training.hard_negatives import bm25_residual_negatives

    pairs = [("what do penguins in antarctica eat", 1), ("krill whales", 4)]
    scores = [{1: 4.0, 2: 3.0, 3: 1.0}, {2: 5.0, 3: 2.0}]  # the second positive is not in BM25's list at all
    mined = bm25_residual_negatives(lambda queries: scores, pairs, TEXTS, skip_top=1, pool=2)

    assert mined[0] == (TEXTS[2], (4.0 - 3.0) / 4.0)  # BM25 gets it right, by a quarter of its best score
    assert mined[1] == (TEXTS[3], (0.0 - 2.0) / 5.0)  # BM25 misses it: a negative gap, a larger margin
    real = bm25_residual_negatives(BM25Retriever(DOCUMENTS).scores, pairs[:1], TEXTS, skip_top=0, pool=3)
    assert real[0][0] in {TEXTS[2], TEXTS[3]} and 0.0 < real[0][1] <= 1.0
