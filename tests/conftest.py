"""Shared fixtures. Models load once per session; every test gets its own FERRET_HOME.

Real services only: SQLite files, a PostgreSQL cluster started on 127.0.0.1 by the suite, embedded Qdrant.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

# No test may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ferret.core.settings import FerretSettings, get_settings


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
    """The settings' SQLite database, migrated to the newest revision (tests/db runs PostgreSQL too)."""
    from ferret.core.db.migrate import upgrade

    upgrade(settings.database_url)
    return settings.database_url


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    """A session on the migrated database; committed at the end of the test unless the test raised."""
    from ferret.core.db.engine import session_scope

    with session_scope(database_url) as db_session:
        yield db_session
