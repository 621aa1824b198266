"""Promptagator prompts (Dai et al. 2022, section 3.1 and appendix A).

Few-shot, one line per document and per query, the examples first and the new document last::

    {e_doc}: {d_1}
    {e_query}: {q_1}
    ...
    {e_doc}: {d_k}
    {e_query}: {q_k}
    {e_doc}: {d}
    {e_query}:

Zero-shot: ``{d} Read the passage and generate a query.`` followed by ``\n{e_query}:``. The paper's prompt ends at
the instruction; a small completion model then starts a new line, which the newline stop cuts to nothing (measured:
5 of 8 SmolLM2 samples empty), so the query line is opened for it as in the few-shot format.

A document is its title and text on one line, truncated (at a word boundary) to an equal share of a 2048-token
context, so that 8 examples, the new document and the generated query fit. The few-shot prefix is the same for
every document of a task, so a backend can compute its key/value cache once and reuse it.

Example:
    >>> builder = PromptBuilder("Article", "Claim", [("Tea. Tea has caffeine.", "tea contains caffeine")])
    >>> print(builder.build(document_text("Coffee", "Coffee is brewed from roasted beans.")))
    Article: Tea. Tea has caffeine.
    Claim: tea contains caffeine
    Article: Coffee. Coffee is brewed from roasted beans.
    Claim:
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ZERO_SHOT_INSTRUCTION = "Read the passage and generate a query."


@dataclass(frozen=True)
class PromptBudget:
    """The context the prompt must fit. Without the generator's tokenizer, tokens are estimated from characters:
    about 3 characters per token is conservative for English prose in small models' vocabularies."""

    context_tokens: int = 2048
    max_new_tokens: int = 48
    chars_per_token: float = 3.0
    min_document_chars: int = 200

    @property
    def prompt_chars(self) -> int:
        return int((self.context_tokens - self.max_new_tokens) * self.chars_per_token)


def one_line(text: str) -> str:
    """Collapse all whitespace, newlines included: a newline would end the line-per-field format."""
    return " ".join(text.split())


def document_text(title: str, body: str) -> str:
    """Title and text of a document as the prompt shows it: ``Title. Text``."""
    title, body = one_line(title), one_line(body)
    if not title:
        return body
    if not body:
        return title
    separator = " " if title[-1] in ".!?:;" else ". "
    return f"{title}{separator}{body}"


def truncate(text: str, max_chars: int) -> str:
    """At most ``max_chars`` characters, cut at the last word boundary that fits."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else text[:max_chars]).rstrip()


class PromptBuilder:
    """Builds the prompts of one task: the few-shot prefix once, then one prompt per document.

    ``examples`` are (document text, query) pairs, the document already as :func:`document_text` gives it.
    With ``zero_shot`` there are no examples and the prompt is the document and the instruction.
    """

    def __init__(
        self,
        e_doc: str,
        e_query: str,
        examples: Sequence[tuple[str, str]],
        *,
        zero_shot: bool = False,
        budget: PromptBudget | None = None,
        example_chars: int | None = None,
    ) -> None:
        """``example_chars``: cut the examples' documents to this many characters and give the new document the
        rest of the context. A 135M generator copies the example closest to its output (measured on SciFact: 14 of
        48 samples copied an example query and 1 in 50 retrieved its own document in the top 10); short examples
        keep the format and leave the new document the most salient text (5 copies, 15 in the top 10)."""
        self.e_doc = e_doc
        self.e_query = e_query
        self.zero_shot = zero_shot
        self.budget = budget or PromptBudget()
        self.example_chars = example_chars
        self.examples = (
            []
            if zero_shot
            else [
                (truncate(one_line(document), example_chars) if example_chars else one_line(document), one_line(query))
                for document, query in examples
            ]
        )
        self.document_chars = self._document_chars()
        self.prefix = "".join(
            f"{self._document_line(document)}\n{self.e_query}: {query}\n" for document, query in self.examples
        )

    def _document_chars(self) -> int:
        """An equal share of the context for each document (the examples' and the new one)."""
        if self.zero_shot:
            available = self.budget.prompt_chars - len(f" {ZERO_SHOT_INSTRUCTION}\n{self.e_query}:")
            return max(self.budget.min_document_chars, available)
        fixed = sum(len(f"{self.e_doc}: \n{self.e_query}: {query}\n") for _, query in self.examples)
        fixed += len(f"{self.e_doc}: \n{self.e_query}:")
        if self.example_chars:
            rest = self.budget.prompt_chars - fixed - sum(len(document) for document, _ in self.examples)
            return max(self.budget.min_document_chars, rest)
        share = (self.budget.prompt_chars - fixed) // (len(self.examples) + 1)
        return max(self.budget.min_document_chars, share)

    def _document_line(self, document: str) -> str:
        return f"{self.e_doc}: {truncate(one_line(document), self.document_chars)}"

    def build(self, document: str) -> str:
        """The prompt for one document (its :func:`document_text`)."""
        if self.zero_shot:
            return f"{truncate(one_line(document), self.document_chars)} {ZERO_SHOT_INSTRUCTION}\n{self.e_query}:"
        return f"{self.prefix}{self._document_line(document)}\n{self.e_query}:"

    def build_many(self, documents: Sequence[str]) -> list[str]:
        return [self.build(document) for document in documents]
