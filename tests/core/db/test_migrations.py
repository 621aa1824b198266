"""The Alembic migrations, up and down, on SQLite and on a real PostgreSQL, against the models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Enum, Integer, MetaData, create_engine, inspect, pool

from ferret.core.db import migrate
from ferret.core.db.models import Base
from ferret.core.errors import FerretError

MODEL_TABLES = set(Base.metadata.tables)


def _tables(url: str) -> set[str]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _schema_differences(url: str, metadata: MetaData) -> list[Any]:
    """What autogenerate would write to turn the database at ``url`` into ``metadata``; empty when equal."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def test_migrations_dir_is_the_repository_folder() -> None:
    folder = migrate.migrations_dir()
    assert folder == Path(__file__).resolve().parents[3] / "migrations"
    assert (folder / "env.py").is_file()


def test_missing_migrations_are_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrate, "_candidate_dirs", lambda: (tmp_path / "nowhere",))
    with pytest.raises(FerretError, match="migrations were not found"):
        migrate.migrations_dir()


def test_one_head_and_it_is_what_upgrade_reaches() -> None:
    # Two heads mean two migrations written against the same parent: merge or re-parent one of them.
    scripts = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    assert len(scripts.get_heads()) == 1
    assert migrate.head_revision() == "0021"


def test_sqlite_folder_is_created_and_absent_file_has_no_revision(tmp_path: Path) -> None:
    database = tmp_path / "nested" / "home" / "ferret.db"
    url = f"sqlite:///{database}"
    assert migrate.current_revision(url) is None
    assert not database.exists()
    migrate.upgrade(url)
    assert database.is_file()
    assert migrate.current_revision(url) == migrate.head_revision()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    assert migrate.current_revision(database_url) is None
    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert _tables(database_url) == MODEL_TABLES

    migrate.downgrade(database_url, "base")
    assert migrate.current_revision(database_url) is None
    assert _tables(database_url) == set()

    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert _tables(database_url) == MODEL_TABLES


def test_upgraded_schema_matches_the_models(database_url: str) -> None:
    # Fails when a model changed without a migration (or a migration without the model).
    migrate.upgrade(database_url)
    assert _schema_differences(database_url, Base.metadata) == []


def test_enum_checks_allow_exactly_the_model_values(database_url: str) -> None:
    # Autogenerate does not compare CHECK constraints: a new JobState member without a migration would pass
    # the test above and then be refused by the database at run time.
    migrate.upgrade(database_url)
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        inspector = inspect(engine)
        for table in Base.metadata.sorted_tables:
            checks = {check["name"]: check["sqltext"] for check in inspector.get_check_constraints(table.name)}
            for column in table.columns:
                if isinstance(column.type, Enum):
                    allowed = set(re.findall(r"'([^']*)'", checks[column.type.name]))
                    assert allowed == set(column.type.enums), f"{table.name}.{column.name}"
    finally:
        engine.dispose()


def test_schema_comparison_sees_a_model_change(tmp_path: Path) -> None:
    # Guards the test above against comparing nothing: a column the migrations lack must show up.
    url = f"sqlite:///{tmp_path / 'ferret.db'}"
    migrate.upgrade(url)
    changed = MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["jobs"].append_column(Column("priority", Integer, nullable=True))
    differences = _schema_differences(url, changed)
    assert [(diff[0], diff[2], diff[3].name) for diff in differences] == [("add_column", "jobs", "priority")]
