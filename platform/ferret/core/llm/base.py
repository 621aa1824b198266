"""The one interface every generator backend implements.

Promptagator prompts are raw completions (few-shot prefix + a new document + ``{e_query}:``), sampled at
temperature 0.7 and stopped at the newline. Small models follow completion prompts far better than chat
templates, so completion is the contract; a chat-only endpoint is adapted inside its backend.

Example:
    >>> backend = build_backend(settings)          # embedded SmolLM2, or an endpoint when one is configured
    >>> [c.text for c in backend.complete([prompt], n=2, max_tokens=48, stop=["\\n"])[0]]
    ['what causes ...', 'how is ...']
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from ferret.core.errors import FerretError


class LLMError(FerretError):
    """The generator failed in a way retries did not fix (unreachable endpoint, bad model, bad answer)."""


@dataclass(frozen=True)
class Completion:
    text: str
    """The generated text, without the prompt and without the stop sequence."""
    finish_reason: str
    """'stop' (a stop sequence or end of text) or 'length' (hit max_tokens: likely a run-on query)."""
    completion_tokens: int
    logprob: float | None = None
    """Mean log-probability of the generated tokens under the model's own (untempered) distribution, the stop token
    included; None when the backend does not report it. Issue 12 item 5: a free filter score, since the sampler
    already has the logits (a low mean marks a query the generator itself found unlikely)."""


@dataclass
class UsageCounters:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0


class LLMBackend(ABC):
    """Completions for a batch of prompts, ``n`` samples each, in prompt order."""

    name: str
    usage: UsageCounters
    prompts_per_call: int = 8
    """How many prompts a caller should hand to one ``complete`` call (a local model batches them in one pass)."""

    @abstractmethod
    def complete(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 64,
        stop: Sequence[str] = ("\n",),
        seed: int | None = None,
    ) -> list[list[Completion]]:
        """``result[i]`` holds the ``n`` completions of ``prompts[i]``. Raises ``LLMError`` on lasting failure."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model or the HTTP connections."""


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the earliest stop sequence, and whether one was found.

    Backends apply it even when the server was given ``stop``: some servers ignore it, or return it.

    Example:
        >>> cut_at_stop("what is x\nDocument: ...", ["\n"])
        ('what is x', True)
    """
    cut = len(text)
    for sequence in stop:
        if sequence:
            position = text.find(sequence)
            if 0 <= position < cut:
                cut = position
    return text[:cut], cut < len(text)
