from ferret.core.training.cropping import independent_crops

PASSAGE = " ".join(f"w{i}" for i in range(40))


def test_crops_are_spans_of_one_passage_within_the_ratio() -> None:
    pairs = independent_crops([PASSAGE, "too short to crop"], pairs=50, seed=3)
    assert len(pairs) == 50
    for left, right in pairs:
        for span in (left, right):
            assert span in PASSAGE
            assert 4 <= len(span.split()) <= 20  # 10 % .. 50 % of 40 words


def test_deterministic_by_seed_and_empty_without_usable_passages() -> None:
    texts = [PASSAGE, PASSAGE.replace("w", "v")]
    assert independent_crops(texts, pairs=8, seed=1) == independent_crops(texts, pairs=8, seed=1)
    assert independent_crops(texts, pairs=8, seed=1) != independent_crops(texts, pairs=8, seed=2)
    assert independent_crops(["a b c"], pairs=4) == []
    assert independent_crops(texts, pairs=0) == []
