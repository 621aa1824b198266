"""The sql connector's watermark on columns a driver hands back untyped: SQLite's text timestamps and epoch seconds;
and its access check when ``source add`` runs it. The contract suite covers PostgreSQL's timestamptz."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.source_add import added, refused, spec_of
from ferret.connectors.registry import build_connector
from ferret.connectors.sql.connector import SqlConnector
from ferret.core.errors import InvalidInputError
from ferret.core.sources.documents import Document
from ferret.core.sources.incremental import CursorMark
from ferret.core.sources.service import add_source


def _table(path: Path, column_type: str, stamps: list[Any]) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(f"CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, updated {column_type})")
        connection.executemany(
            "INSERT INTO notes VALUES (?, ?, ?)", [(n, f"Body of note {n}.", stamp) for n, stamp in enumerate(stamps)]
        )


def _sync(path: Path, cursor: Any) -> tuple[list[str], Any]:
    connector = SqlConnector(
        name="notes",
        url=f"sqlite:///{path}",
        table="notes",
        text_columns=["body"],
        updated_column="updated",
        overlap_seconds=60,
    )
    ids: list[str] = []
    try:
        for item in connector.sync(cursor):
            if isinstance(item, Document):
                ids.append(item.external_id)
            elif isinstance(item, CursorMark):
                cursor = item.cursor
    finally:
        connector.close()
    return ids, cursor


Edit = Callable[[sqlite3.Connection], None]


@pytest.mark.parametrize(
    ("column_type", "stamps", "edit"),
    [
        (
            "TIMESTAMP",
            ["2026-01-01 00:00:00", "2026-01-01 01:00:00", "2026-01-01 02:00:00"],
            "UPDATE notes SET body = 'Edited.', updated = '2026-01-02 00:00:00' WHERE id = 1",
        ),
        (
            "TEXT",
            ["2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00"],
            "UPDATE notes SET body = 'Edited.', updated = '2026-01-02T00:00:00+00:00' WHERE id = 1",
        ),
        (
            "INTEGER",
            [1_767_225_600, 1_767_229_200, 1_767_232_800],
            "UPDATE notes SET updated = 1767312000 WHERE id = 1",
        ),
    ],
    ids=["sqlite-timestamp-text", "iso-text-with-offset", "epoch-seconds"],
)
def test_the_next_sync_reads_only_rows_changed_since_the_watermark(
    tmp_path: Path, column_type: str, stamps: list[Any], edit: str
) -> None:
    path = tmp_path / "notes.sqlite"
    _table(path, column_type, stamps)
    first, cursor = _sync(path, None)
    with sqlite3.connect(path) as connection:
        connection.execute(edit)

    second, _ = _sync(path, cursor)

    assert first == ["0", "1", "2"]
    # Row 2 is the watermark itself, read again by the overlap; row 0 is an hour older than the watermark.
    assert second == ["2", "1"]


def test_an_updated_column_that_is_not_a_time_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    _table(path, "TEXT", ["yesterday", "today", "tomorrow"])

    with pytest.raises(InvalidInputError, match="not an ISO timestamp"):
        _sync(path, None)


@pytest.fixture
def articles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite database with table ``articles``, its URL in ``KB_URL`` (a URL is a secret reference in a spec)."""
    path = tmp_path / "kb.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, title TEXT, body TEXT, teams TEXT)")
        connection.execute("INSERT INTO articles VALUES (1, 'Refunds', 'Refunds take five days.', 'support')")
    monkeypatch.setenv("KB_URL", f"sqlite:///{path}")
    return path


def sql_source(**extra: Any) -> dict[str, Any]:
    config = {"url": {"env": "KB_URL"}, "table": "articles", "title_column": "title", "text_columns": ["body"]}
    return {**config, "acl_column": "teams", **extra}


def test_source_add_reads_one_row_of_every_configured_column_before_storing(articles: Path, session: Session) -> None:
    assert added(session, "sql", sql_source()).config["url"] == {"env": "KB_URL"}


def test_source_add_refuses_a_missing_table_column_or_database_file(
    articles: Path, session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused(
        session,
        "sql",
        sql_source(table="article"),
        r"^SQL source could not read columns body, id, teams, title of table article at \{env: KB_URL\} \(no such "
        r"table: article\); check table, db_schema and the column names; nothing was stored",
    )
    refused(session, "sql", sql_source(acl_column="team"), r"\(no such column: articles\.team\); check table")
    monkeypatch.setenv("KB_URL", f"sqlite:///{tmp_path / 'kb.sqlite3'}")
    refused(session, "sql", sql_source(), r"^SQL source database file \S+/kb\.sqlite3 does not exist; check url;")
    assert not (tmp_path / "kb.sqlite3").exists()  # the check created no empty database there


def test_source_add_replace_with_a_bad_table_keeps_the_stored_definition(articles: Path, session: Session) -> None:
    source = added(session, "sql", sql_source())
    source.checkpoint = {"watermark": "2026-01-01"}
    session.commit()

    refused(session, "sql", sql_source(table="archive"), r"no such table: archive", replace=True)

    session.expire_all()
    assert (source.config["table"], source.checkpoint) == ("articles", {"watermark": "2026-01-01"})
    stored = add_source(
        session, spec_of("sql", sql_source(table="archive")), build_connector, replace=True, check=False
    )
    assert (stored.config["table"], stored.checkpoint) == ("archive", None)  # --no-check stores it as given
