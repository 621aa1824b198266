"""PassageChunker with the real MiniLM wordpiece tokenizer: passages of at most N wordpieces, title included."""

from __future__ import annotations

import itertools
import random
import string
from typing import Any

import pytest

from ferret.core.corpus.chunking import Chunk, PassageChunker, passage_text

WORDS = [
    "the",
    "committee",
    "reviewed",
    "unbelievably",
    "intricate",
    "antidisestablishmentarian",
    "proposals",
    "about",
    "photosynthesis",
    "hydroelectricity",
    "and",
    "counterrevolutionary",
    "historiography",
    "while",
    "municipal",
    "representatives",
    "disagreed",
]


def long_body(sentences: int = 80, seed: int = 0) -> str:
    """Sentences of 6 to 14 words, many of them split into several wordpieces."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        out.append(" ".join(words).capitalize() + rng.choice([".", ".", "!", "?"]))
    return " ".join(out)


def wordpieces(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def spans(body: str, chunks: list[Chunk]) -> list[tuple[int, int]]:
    """Where each chunk's text lies in the body (chunks move forward, so search from the previous start)."""
    found: list[tuple[int, int]] = []
    position = 0
    for chunk in chunks:
        start = body.index(chunk.text, position)
        found.append((start, start + len(chunk.text)))
        position = start + 1
    return found


@pytest.mark.parametrize(("max_tokens", "overlap"), [(32, 4), (64, 8), (128, 16), (288, 32)])
@pytest.mark.parametrize("title", ["", "Minutes of the municipal committee"])
def test_every_chunk_fits_the_token_budget_title_included(
    tokenizer: Any, max_tokens: int, overlap: int, title: str
) -> None:
    body = long_body()
    chunks = PassageChunker(tokenizer, max_tokens=max_tokens, overlap=overlap).chunk(title, body)

    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.token_count <= max_tokens
        assert wordpieces(tokenizer, passage_text(title, chunk.text)) <= max_tokens
        # The count is exact: title wordpieces + window wordpieces.
        assert chunk.token_count == wordpieces(tokenizer, title) + wordpieces(tokenizer, chunk.text)


@pytest.mark.parametrize(("max_tokens", "overlap"), [(64, 8), (128, 16)])
def test_consecutive_chunks_overlap_and_cover_the_whole_body(tokenizer: Any, max_tokens: int, overlap: int) -> None:
    body = long_body()
    chunks = PassageChunker(tokenizer, max_tokens=max_tokens, overlap=overlap).chunk("", body)
    located = spans(body, chunks)

    assert located[0][0] == 0
    assert located[-1][1] == len(body)
    for (_, previous_end), (start, _) in itertools.pairwise(located):
        assert start < previous_end  # overlap: the next window starts before the previous one ends
        overlap_tokens = wordpieces(tokenizer, body[start:previous_end])
        assert 0 < overlap_tokens <= overlap + 2


def test_no_overlap_means_adjacent_windows(tokenizer: Any) -> None:
    body = long_body()
    chunks = PassageChunker(tokenizer, max_tokens=64, overlap=0).chunk("", body)
    located = spans(body, chunks)

    for (_, previous_end), (start, _) in itertools.pairwise(located):
        assert previous_end <= start
        assert body[previous_end:start].strip() == ""


def test_no_chunk_starts_or_ends_inside_a_word(tokenizer: Any) -> None:
    body = long_body(sentences=120, seed=3)
    chunks = PassageChunker(tokenizer, max_tokens=48, overlap=12).chunk("", body)

    for start, end in spans(body, chunks):
        assert start == 0 or not (body[start - 1].isalnum() and body[start].isalnum()), body[start - 10 : start + 10]
        assert end == len(body) or not (body[end - 1].isalnum() and body[end].isalnum()), body[end - 10 : end + 10]


def test_windows_prefer_to_end_after_a_sentence(tokenizer: Any) -> None:
    body = long_body(sentences=100, seed=5)
    chunks = PassageChunker(tokenizer, max_tokens=128, overlap=16).chunk("", body)

    # Sentences are at most ~40 wordpieces, so the last quarter of every window holds a sentence end.
    assert all(chunk.text[-1] in ".!?" for chunk in chunks)


def test_a_short_document_is_one_chunk(tokenizer: Any) -> None:
    chunks = PassageChunker(tokenizer, max_tokens=288, overlap=32).chunk("Espresso", "  Espresso is strong coffee.  ")

    expected_count = wordpieces(tokenizer, "Espresso") + wordpieces(tokenizer, "Espresso is strong coffee.")
    assert chunks == [Chunk(text="Espresso is strong coffee.", token_count=expected_count)]


@pytest.mark.parametrize("body", ["", "   ", "\n\t\n"])
def test_an_empty_body_has_no_chunks(tokenizer: Any, body: str) -> None:
    assert PassageChunker(tokenizer, max_tokens=64, overlap=8).chunk("A title", body) == []


def test_a_long_title_takes_at_most_half_of_each_passage(tokenizer: Any) -> None:
    title = " ".join(["historiography"] * 200)
    body = long_body()
    chunks = PassageChunker(tokenizer, max_tokens=64, overlap=8).chunk(title, body)

    for chunk in chunks:
        assert chunk.token_count <= 64
        assert wordpieces(tokenizer, chunk.text) >= 64 // 2 - 8  # the body keeps at least half, less a cut


def test_a_long_title_is_truncated_in_the_text_that_is_embedded(tokenizer: Any) -> None:
    title = " ".join(["historiography"] * 200)
    chunker = PassageChunker(tokenizer, max_tokens=64, overlap=8)
    stored_title = chunker.fit_title(title)  # what the Ingestor stores on the document
    chunks = chunker.chunk(stored_title, long_body())

    # What PointBuilder embeds: passage_text(document title, chunk text).
    assert all(wordpieces(tokenizer, passage_text(stored_title, chunk.text)) <= 64 for chunk in chunks)


def test_a_small_budget_with_a_long_title_still_fits(tokenizer: Any) -> None:
    """max_passage_tokens may be as low as 32: a title of half of it must leave the body only the other half."""
    title = "Counterrevolutionary historiography of antidisestablishmentarian hydroelectricity and photosynthesis"
    assert wordpieces(tokenizer, title) > 20
    chunks = PassageChunker(tokenizer, max_tokens=40, overlap=4).chunk(title, long_body())

    assert all(chunk.token_count <= 40 for chunk in chunks)


def test_a_word_longer_than_the_window_does_not_explode_into_one_token_chunks(tokenizer: Any) -> None:
    rng = random.Random(1)
    giant = "".join(rng.choice(string.ascii_lowercase) for _ in range(99))  # ~60 wordpieces, one word
    body = f"Before the blob. {giant} and after the blob there are a few more words."
    chunks = PassageChunker(tokenizer, max_tokens=32, overlap=4).chunk("", body)

    assert len(chunks) <= 5
    assert all(chunk.token_count <= 32 for chunk in chunks)
    assert chunks[-1].text.endswith("more words.")


def test_overlap_must_be_less_than_half_the_budget(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="overlap"):
        PassageChunker(tokenizer, max_tokens=64, overlap=32)


def test_passage_text_puts_the_title_first() -> None:
    assert passage_text("Title", "Body") == "Title\nBody"
    assert passage_text("", "Body") == "Body"
