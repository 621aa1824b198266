"""Alembic migrations run from code: no ``alembic.ini``, the database URL comes from the settings.

The migration scripts live in ``migrations/`` at the repository root. A wheel bundles that folder as
``ferret/core/db/_migrations`` (see ``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml), so
the same functions work from a source checkout, an editable install and an installed wheel.

Example:
    >>> from ferret.core.db.migrate import current_revision, upgrade
    >>> upgrade("sqlite:////tmp/ferret-demo/ferret.db")
    >>> current_revision("sqlite:////tmp/ferret-demo/ferret.db")
    '0001'
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url, pool
from sqlalchemy.engine import URL

from ferret.core.errors import FerretError

_HERE = Path(__file__).resolve().parent


def _candidate_dirs() -> tuple[Path, ...]:
    """Where the migrations may be, in order: bundled in a wheel, then the repository root of a checkout."""
    # This file is <root>/platform/ferret/core/db/migrate.py in a checkout: parents[3] is <root>.
    return (_HERE / "_migrations", _HERE.parents[3] / "migrations")


def migrations_dir() -> Path:
    """The folder that holds Alembic's ``env.py`` and ``versions/``."""
    candidates = _candidate_dirs()
    for candidate in candidates:
        if (candidate / "env.py").is_file() and (candidate / "versions").is_dir():
            return candidate
    searched = ", ".join(str(candidate) for candidate in candidates)
    raise FerretError(
        f"The database migrations were not found (looked in {searched}); reinstall Ferret from a complete "
        "wheel or run it from a full source checkout."
    )


def _scripts_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("path_separator", "os")
    return config


def alembic_config(url: str) -> Config:
    """An Alembic config for the database at ``url``, built in code."""
    config = _scripts_config()
    # Config values go through configparser interpolation: a literal % (URL-encoded password) must be doubled.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _prepare_sqlite(url: URL) -> None:
    """Create the folder of a SQLite file, which SQLite itself will not do."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return
    if database.startswith("file:"):  # URI filename (?uri=true): leave it to SQLite.
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision`` (default: the newest), creating it if it is SQLite."""
    _prepare_sqlite(make_url(url))
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Take the database at ``url`` back to ``revision``; ``"base"`` drops every table of Ferret."""
    _prepare_sqlite(make_url(url))
    command.downgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; ``None`` for a database never migrated (or absent)."""
    parsed = make_url(url)
    database = parsed.database
    if (
        parsed.get_backend_name() == "sqlite"
        and database
        and database != ":memory:"
        and not database.startswith("file:")
        and not Path(database).expanduser().exists()
    ):
        return None  # Do not create an empty file just to look inside it.
    engine = create_engine(parsed, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision among the migration scripts (what :func:`upgrade` goes to by default)."""
    return ScriptDirectory.from_config(_scripts_config()).get_current_head()
