"""Alembic environment of Ferret: the target schema is ``ferret.core.db.models``, the URL the caller's.

``ferret.core.db.migrate`` builds the Alembic config in code (there is no ``alembic.ini``) and sets
``sqlalchemy.url``; a caller may instead hand over an open connection in ``config.attributes["connection"]``.
Logging is left to the application: this file never calls ``logging.config.fileConfig``.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from ferret.core.db.models import Base

config = context.config
target_metadata = Base.metadata


def _options(dialect_name: str) -> dict[str, Any]:
    return {
        "target_metadata": target_metadata,
        # SQLite cannot ALTER most things: batch mode recreates the table instead.
        "render_as_batch": dialect_name == "sqlite",
        "compare_type": True,
        "compare_server_default": True,
    }


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("No database URL: run migrations through ferret.core.db.migrate.")
    return url


def run_migrations_offline() -> None:
    """Write the SQL to stdout instead of running it (``alembic upgrade --sql``)."""
    url = _url()
    context.configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_options(url.split(":", 1)[0].split("+", 1)[0]),
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, **_options(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # A plain engine, not ferret.core.db.engine.get_engine: SQLite foreign keys stay off while batch mode
    # recreates tables, and no pooled connection outlives the migration.
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
