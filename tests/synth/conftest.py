"""Fixtures of the Promptagator tests: a migrated SQLite database with a small corpus written straight into it
(no encoder, no chunker: these tests load no model), and a scripted generator backend.

``ScriptedBackend`` is a real implementation of ``LLMBackend`` whose completions come from a script instead of
a model: it stands in for the language model only, whose real backends are tested in ``tests/llm``. Test
modules cannot import this conftest (importlib import mode), so it travels as a fixture.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import Corpus, Document, Passage
from ferret.core.llm.base import Completion, LLMBackend, UsageCounters

DOCUMENTS: list[tuple[str, str, str]] = [
    ("d1", "Paris", "Paris is the capital and largest city of France, on the river Seine."),
    ("d2", "Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    ("d3", "Jupiter", "Jupiter is the largest planet of the solar system, a gas giant with a great red spot."),
    ("d4", "Espresso", "Espresso is coffee brewed by forcing hot water through finely ground beans."),
    ("d5", "Volcano", "A volcano erupts when molten rock called magma reaches the surface of the earth."),
    ("d6", "Chess", "In chess the king is checkmated when it is attacked and cannot escape."),
    ("d7", "Penguins", "Penguins are flightless birds that swim in the cold seas of the southern hemisphere."),
    ("d8", "Tides", "Ocean tides rise and fall twice a day, pulled by the gravity of the moon."),
    ("d9", "Bread", "Bread dough rises because yeast ferments sugar and releases carbon dioxide gas."),
    ("d10", "Glaciers", "Glaciers are slow rivers of ice that carve valleys as they move down mountains."),
]


def add_documents(session: Session, corpus: Corpus, rows: Sequence[tuple[str, str, str]], source: str = "beir") -> None:
    for external_id, title, body in rows:
        document = Document(
            corpus_id=corpus.id,
            source=source,
            external_id=external_id,
            title=title,
            body=body,
            content_hash=hashlib.sha256(body.encode()).hexdigest(),
            passages=[Passage(corpus_id=corpus.id, ordinal=0, text=f"{title}. {body}", token_count=20)],
        )
        session.add(document)
    session.flush()


@pytest.fixture
def corpus(session: Session) -> Corpus:
    """Corpus ``facts``: ten one-line documents on distinct topics, external ids d1..d10, committed."""
    facts = create_corpus(session, "facts")
    add_documents(session, facts, DOCUMENTS)
    session.commit()
    return facts


@pytest.fixture
def documents() -> list[tuple[str, str, str]]:
    return list(DOCUMENTS)


@pytest.fixture
def insert_documents() -> Callable[..., None]:
    return add_documents


Script = Callable[[str, int], "str | Completion"]
"""(prompt, sample index) -> the completion text (finish reason 'stop'), or a whole Completion."""


class ScriptedBackend(LLMBackend):
    """Completions from a script; records every call. ``fail_on`` = {call number (1-based): exception}."""

    name = "scripted"

    def __init__(self, script: Script, *, fail_on: dict[int, BaseException] | None = None) -> None:
        self.script = script
        self.fail_on = dict(fail_on or {})
        self.usage = UsageCounters()
        self.calls: list[dict[str, Any]] = []

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
        self.calls.append(
            {"prompts": list(prompts), "n": n, "temperature": temperature, "stop": list(stop), "seed": seed}
        )
        failure = self.fail_on.get(len(self.calls))
        if failure is not None:
            raise failure
        self.usage.calls += 1
        self.usage.prompt_tokens += sum(len(prompt.split()) for prompt in prompts)
        results: list[list[Completion]] = []
        for prompt in prompts:
            completions: list[Completion] = []
            for sample in range(n):
                answer = self.script(prompt, sample)
                if isinstance(answer, str):
                    answer = Completion(text=answer, finish_reason="stop", completion_tokens=len(answer.split()))
                completions.append(answer)
            results.append(completions)
        return results


def last_document(prompt: str) -> str:
    """The text of the document a few-shot prompt asks about (its second-to-last line, marker removed)."""
    line = prompt.splitlines()[-2]
    return line.split(": ", 1)[1]


@pytest.fixture
def scripted() -> type[ScriptedBackend]:
    return ScriptedBackend


@pytest.fixture
def prompted_document() -> Callable[[str], str]:
    return last_document
