"""Shared fixtures. Models load once per session; every test gets its own FERRET_HOME. Builders of small document
folders and BEIR datasets in ``tmp_path`` and the base encoder serve every test folder.

Real services only: SQLite files, a PostgreSQL cluster started on 127.0.0.1 by the suite, embedded Qdrant.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ferret_testing import write_beir

# No test may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# pytest-xdist starts its workers with COLUMNS=80 and LINES=24, and rich fixes a console's width from them when the
# console is made: the CLI's tables would wrap at 80 columns whatever width a test asks for.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import base_model_path, load_encoder
from ferret.core.settings import FerretSettings, get_settings


@pytest.fixture(scope="session", autouse=True)
def shared_onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ONNX export cache for the whole run (``FERRET_ONNX_CACHE``), as one machine keeps one per home: the base
    model is exported once instead of in every test's FERRET_HOME. Tests of the cache itself point it elsewhere."""
    folder = tmp_path_factory.mktemp("onnx-cache")
    previous = os.environ.get("FERRET_ONNX_CACHE")
    os.environ["FERRET_ONNX_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("FERRET_ONNX_CACHE", None)
    else:
        os.environ["FERRET_ONNX_CACHE"] = previous


@pytest.fixture(autouse=True)
def drop_index_files(tmp_path: Path) -> Iterator[None]:
    """Remove a test's embedded Qdrant folders when it ends, after every other fixture of the test has stopped.

    Each Qdrant Edge collection preallocates about 200 MB (WAL segments, mmap pages), however few its points: a full
    run left 20 GB under /tmp and filled the CI disk. The test's other files stay for reading after a failure.
    (pytest's ``tmp_path_retention_policy = "failed"`` is no answer: it frees a passed test's folder name for the next
    test, and caches keyed by path, such as the SQLAlchemy engines, then open the previous test's database.)"""
    yield
    for folder in [*tmp_path.glob("qdrant"), *tmp_path.glob("*/qdrant"), *tmp_path.glob("*/*/qdrant")]:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def ferret_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh FERRET_HOME for one test, also visible to code that reads settings from the environment."""
    home = tmp_path / "ferret-home"
    monkeypatch.setenv("FERRET_HOME", str(home))
    monkeypatch.delenv("FERRET_DATABASE_URL", raising=False)
    monkeypatch.delenv("FERRET_QDRANT_URL", raising=False)
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


@pytest.fixture
def settings(ferret_home: Path) -> FerretSettings:
    settings = FerretSettings(home=ferret_home)
    settings.ensure_home()
    return settings


@pytest.fixture
def database_url(settings: FerretSettings) -> str:
    """The settings' SQLite database, migrated to the newest revision (tests/core/db runs PostgreSQL too)."""
    from ferret.core.db.migrate import upgrade

    upgrade(settings.database_url)
    return settings.database_url


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    """A session on the migrated database; committed at the end of the test unless the test raised."""
    from ferret.core.db.engine import session_scope

    with session_scope(database_url) as db_session:
        yield db_session


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
