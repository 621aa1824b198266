"""Fixtures of the core tests: the real MiniLM encoder (loaded once), a migrated SQLite database, the embedded
Qdrant Edge backend, every index backend kind with unique collection names (the index contract), and builders of
small document folders and BEIR datasets in ``tmp_path``.

Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import base_model_path, load_encoder
from ferret.core.index.backend import IndexBackend
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.server_backend import QdrantServerBackend
from ferret.core.index.types import IndexPoint
from ferret.core.settings import FerretSettings


@pytest.fixture(scope="session")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> DualEncoder:
    """The base MiniLM encoder, loaded once per session into the process-wide cache that Ferret itself uses.

    The cache key is (path, device, max_passage_tokens), so every test whose settings keep the defaults reuses it.
    """
    settings = FerretSettings(home=tmp_path_factory.mktemp("encoder-home"))
    return load_encoder(base_model_path(settings), settings)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The base encoder's wordpiece tokenizer, as the ingest chunker loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_model_path()), local_files_only=True)


class FailingEdgeBackend(EdgeIndexBackend):
    """The real embedded backend, whose upserts can be made to fail midway: half a batch (rounded up) lands, then
    it raises."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.upsert_failure: BaseException | None = None
        self.upsert_calls = 0

    def upsert(self, collection: str, points: Sequence[IndexPoint]) -> None:
        self.upsert_calls += 1
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


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``{relative path: text or bytes}`` under ``root`` (folders created) and return ``root``."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def write_beir(
    root: Path,
    corpus: list[dict[str, Any]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    split: str = "test",
) -> Path:
    """A BEIR dataset folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv (with its header)."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": qid, "text": text}) + "\n" for qid, text in queries.items()), encoding="utf-8"
    )
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{qid}\t{doc_id}\t{score}" for qid, judged in qrels.items() for doc_id, score in judged.items()]
    (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def make_files() -> Callable[[Path, dict[str, str | bytes]], Path]:
    return write_files


@pytest.fixture
def make_beir() -> Callable[..., Path]:
    return write_beir


TINY_BEIR_CORPUS: list[dict[str, Any]] = [
    {"_id": "d1", "title": "Paris", "text": "Paris is the capital and largest city of France, on the Seine."},
    {"_id": "d2", "title": "Photosynthesis", "text": "Plants turn sunlight, water and carbon dioxide into sugar."},
    {"_id": "d3", "title": "Jupiter", "text": "Jupiter is the largest planet of the solar system, a gas giant."},
    {"_id": "d4", "title": "Espresso", "text": "Espresso is coffee brewed by forcing hot water through fine grounds."},
    {"_id": "d5", "title": "Volcano", "text": "A volcano erupts when molten rock called magma reaches the surface."},
    {"_id": "d6", "title": "Chess", "text": "In chess the king is checkmated when it is attacked and cannot escape."},
]
TINY_BEIR_QUERIES = {
    "q1": "What is the capital of France?",
    "q2": "How do plants make sugar from sunlight?",
    "q3": "largest planet in the solar system",
    "q4": "how is espresso coffee brewed",
}
TINY_BEIR_QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {"d4": 2}}


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    """Six one-line documents on distinct topics, four queries with one relevant document each."""
    return write_beir(tmp_path / "tiny-beir", TINY_BEIR_CORPUS, TINY_BEIR_QUERIES, TINY_BEIR_QRELS)


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
