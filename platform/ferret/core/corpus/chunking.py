"""Tokenizer-aware chunking into passages of at most N wordpieces, title included (REALM, Guu et al. 2020, §4).

A passage is the document title plus a window of the body. Windows are cut at token boundaries of the encoder's
own tokenizer, never inside a word, and preferably after a sentence end near the window's end; consecutive
windows overlap by a configurable number of tokens so that an answer straddling a cut is still whole somewhere.

Example:
    >>> chunker = PassageChunker(tokenizer, max_tokens=DEFAULT_PASSAGE_TOKENS, overlap=32)
    >>> [c.text for c in chunker.chunk("Title", "A long body ...")]

A new corpus's passages are ``DEFAULT_PASSAGE_TOKENS`` (128) wordpieces long, the length the base encoder
(all-MiniLM-L6-v2) was trained on; it reads a longer passage as a blur of its parts. Measured with the base model on
the labels no goal is scored on (benchmarks/RESULTS.md, issue 12, twenty-third session), 128 against 288 (REALM's
length, the default until then): dense search SciFact train 66.5 → 69.3 nDCG@10, NFCorpus dev 30.6 → 31.6, SQuAD
dev 78.1 → 78.1 (its paragraphs are short already); BM25 over the shorter passages loses a little (SciFact train
70.3 → 68.6), and hybrid search at its default fusion gains on average (``ferret.core.search.fusion``). A corpus
keeps the length it was created with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_SENTENCE_END = {".", "!", "?", ";", ":"}

DEFAULT_PASSAGE_TOKENS = 128
"""Wordpieces of a new corpus's passages, title included (module docstring)."""


@dataclass(frozen=True)
class Chunk:
    text: str
    """The body window (the title is stored on the document and prepended for embedding)."""
    token_count: int
    """Wordpieces of title + window, without the [CLS]/[SEP] specials."""


def passage_text(title: str, text: str) -> str:
    """The text that is embedded and BM25-indexed: title, then body (BEIR's title + text convention)."""
    return f"{title}\n{text}" if title else text


class PassageChunker:
    def __init__(self, tokenizer: Any, *, max_tokens: int = DEFAULT_PASSAGE_TOKENS, overlap: int = 32) -> None:
        if overlap >= max_tokens // 2:
            raise ValueError("overlap must be less than half of max_tokens")
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overlap = overlap

    def _tokenize(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        tokens = self.tokenizer.convert_ids_to_tokens(encoding["input_ids"])
        return tokens, [tuple(span) for span in encoding["offset_mapping"]]

    def fit_title(self, title: str) -> str:
        """The title as stored and embedded: whitespace normalized, cut at a token boundary to at most half of a
        passage, so title + window always fit ``max_tokens``."""
        title = " ".join(title.split())
        if not title:
            return title
        tokens, offsets = self._tokenize(title)
        if len(tokens) > self.max_tokens // 2:
            title = title[: offsets[self.max_tokens // 2 - 1][1]]
        return title

    def chunk(self, title: str, body: str) -> list[Chunk]:
        """Windows of ``body``; ``title`` should already be ``fit_title(title)`` (it is fitted again if not)."""
        title = self.fit_title(title)
        title_tokens = self._tokenize(title)[0] if title else []
        # At least half of max_tokens (the title takes at most half), so always more than the overlap.
        budget = self.max_tokens - len(title_tokens)
        tokens, offsets = self._tokenize(body)
        if not tokens:
            return []
        chunks: list[Chunk] = []
        start = 0
        while start < len(tokens):
            end = min(start + budget, len(tokens))
            if end < len(tokens):
                end = self._cut_point(tokens, start, end)
            text = body[offsets[start][0] : offsets[end - 1][1]]
            chunks.append(Chunk(text=text, token_count=len(title_tokens) + end - start))
            if end >= len(tokens):
                break
            next_start = max(end - self.overlap, start + 1)
            while next_start < end and tokens[next_start].startswith("##"):
                next_start += 1  # never start inside a word
            start = next_start
        return chunks

    @staticmethod
    def _cut_point(tokens: list[str], start: int, end: int) -> int:
        """End of the window: after a sentence end in its last quarter, else at a word boundary in its second half,
        else (one word longer than half the window) inside that word rather than in many one-token windows."""
        floor = start + (end - start) * 3 // 4
        for cut in range(end, floor, -1):
            if tokens[cut - 1] in _SENTENCE_END and not tokens[cut].startswith("##"):
                return cut
        half = start + max(1, (end - start) // 2)
        cut = end
        while cut > half and tokens[cut].startswith("##"):
            cut -= 1
        return end if tokens[cut].startswith("##") else cut
