"""Fixtures of the core tests: the real MiniLM encoder (loaded once), a migrated SQLite database, the embedded
Qdrant Edge backend, every index backend kind with unique collection names (the index contract), and builders of
small document folders and BEIR datasets in ``tmp_path``; for the synth and pipeline tests, corpora of given documents
and a scripted LLM backend.

Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient
from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import Corpus, Document, Passage
from ferret.core.index.backend import IndexBackend
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.server_backend import QdrantServerBackend
from ferret.core.index.types import IndexPoint
from ferret.core.llm.base import Completion, LLMBackend, UsageCounters
from ferret.core.settings import FerretSettings


class FailingEdgeBackend(EdgeIndexBackend):
    """The real embedded backend, whose upserts can be made to fail midway: half a batch (rounded up) lands, then
    it raises. ``refused_external_ids`` makes it refuse, whole, any batch holding a point of those documents, as an
    index that validates payloads would."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.upsert_failure: BaseException | None = None
        self.upsert_calls = 0
        self.refused_external_ids: set[str] = set()

    def upsert(self, collection: str, points: Sequence[IndexPoint]) -> None:
        self.upsert_calls += 1
        refused = sorted({str(p.payload.get("external_id")) for p in points} & self.refused_external_ids)
        if refused:
            raise ValueError(f"payload of {refused[0]} rejected")
        if self.upsert_failure is not None:
            super().upsert(collection, points[: (len(points) + 1) // 2])
            raise self.upsert_failure
        super().upsert(collection, points)


@pytest.fixture
def backend(settings: FerretSettings) -> Iterator[FailingEdgeBackend]:
    """The embedded default backend under the settings' FERRET_HOME; upserts succeed until told otherwise."""
    edge = FailingEdgeBackend(settings.qdrant_path)
    yield edge
    edge.close()


@pytest.fixture
def fail_upserts(backend: FailingEdgeBackend) -> Callable[[BaseException | None], None]:
    """``fail_upserts(error)`` makes every later upsert of ``backend`` land half its points and raise ``error``;
    ``fail_upserts(None)`` heals it."""

    def arm(error: BaseException | None) -> None:
        backend.upsert_failure = error

    return arm


BACKEND_KINDS = [
    "embedded",
    "server-memory",
    pytest.param(
        "server-url",
        marks=[
            pytest.mark.integration,
            pytest.mark.skipif(not os.environ.get("FERRET_QDRANT_URL"), reason="FERRET_QDRANT_URL is not set"),
        ],
    ),
]


@pytest.fixture(scope="module", params=BACKEND_KINDS)
def index_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBackend]:
    """One backend per kind for the module; every test works in collections of its own (see ``names``)."""
    backend: IndexBackend
    if request.param == "embedded":
        backend = EdgeIndexBackend(tmp_path_factory.mktemp("qdrant"))
    elif request.param == "server-memory":
        backend = QdrantServerBackend(QdrantClient(":memory:"))
    else:
        backend = QdrantServerBackend(QdrantClient(url=os.environ["FERRET_QDRANT_URL"], timeout=60))
    yield backend
    backend.close()


@pytest.fixture
def names(index_backend: IndexBackend) -> Iterator[dict[str, str]]:
    """Unique collection and alias names, so a shared real server is left as it was found."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    chosen = {"alias": prefix, "v1": f"{prefix}__v1", "v2": f"{prefix}__v2", "v3": f"{prefix}__v3"}
    yield chosen
    index_backend.delete_alias(chosen["alias"])
    for key in ("v1", "v2", "v3"):
        index_backend.drop_collection(chosen[key])


# -- synth and pipeline tests ------------------------------------------------------------------------------------------
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
