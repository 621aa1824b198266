"""Rows of a SQL table or view as documents, through SQLAlchemy Core (PostgreSQL, MySQL/MariaDB, SQLite...).

Incremental by an ``updated_column`` watermark: rows with ``updated >= watermark - overlap`` are read in
``(updated, id)`` order, and a ``CursorMark`` follows every row, so a sync resumes after the last persisted row;
the overlap re-reads rows committed late with an older timestamp (harmless: unchanged content is not re-embedded).
Without an ``updated_column`` every sync reads the whole table. Deletions come from the complete id listing.

Permissions: an ``acl_column`` (a text of comma-separated names, or an array) or static ``groups``; a name that
is already a principal (``public``, ``user:...``, ``x:group:y``) is kept, any other becomes ``<source>:group:<name>``.
A permission pass reads ``(id, acl)`` of every row, so an ACL edit that does not touch ``updated_column`` is seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferret.connectors.access import reason
from ferret.connectors.principal_map import principals_for
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, IncrementalConnector, PermissionPass, SyncItem

_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


class SqlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, description="SQLAlchemy URL; give it as {env: ...} when it holds a password.")
    table: str = Field(pattern=_IDENTIFIER)
    db_schema: str | None = Field(default=None, pattern=_IDENTIFIER)
    id_column: str = Field(default="id", pattern=_IDENTIFIER)
    title_column: str | None = Field(default=None, pattern=_IDENTIFIER)
    text_columns: list[str] = Field(min_length=1)
    updated_column: str | None = Field(default=None, pattern=_IDENTIFIER)
    acl_column: str | None = Field(default=None, pattern=_IDENTIFIER)
    groups: list[str] = Field(default_factory=list)
    metadata_columns: list[str] = Field(default_factory=list)
    overlap_seconds: float = Field(default=300.0, ge=0)
    batch_size: int = Field(default=500, gt=0)
    max_text_bytes: int = Field(default=5_000_000, gt=0)
    name: str | None = None


class SqlConnector(IncrementalConnector, SlimConnector, PermissionPass):
    """Example:
    >>> connector = SqlConnector(url="postgresql+psycopg://ferret@db/kb", table="articles", text_columns=["body"],
    ...                          title_column="title", updated_column="updated_at", acl_column="teams")
    """

    kind = "sql"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = SqlConfig(**config)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in error.errors())
            raise InvalidInputError(f"Invalid sql connector config ({problems}).") from None
        for column in [*self.settings.text_columns, *self.settings.metadata_columns]:
            if not re.match(_IDENTIFIER, column):
                raise InvalidInputError(f"Column name {column!r} is not a plain identifier (letters, digits, _).")
        try:
            self.engine = sa.create_engine(self.settings.url, pool_pre_ping=True)
        except Exception as error:
            raise InvalidInputError(f"Invalid sql connector url: {error}.") from None
        s = self.settings
        names = {s.id_column, *s.text_columns, *s.metadata_columns}
        names |= {c for c in (s.title_column, s.updated_column, s.acl_column) if c}
        self.table = sa.table(s.table, *(sa.column(name) for name in sorted(names)), schema=s.db_schema)

    def check_access(self) -> None:
        """Connect, then ``SELECT <every configured column> FROM <table> LIMIT 1`` (each dialect's own limit), so a
        wrong password, table or column name is said now rather than at the first sync."""
        s = self.settings
        where = self.engine.url.render_as_string(hide_password=True)
        database = self.engine.url.database or ":memory:"
        sqlite_file = self.engine.url.get_backend_name() == "sqlite" and database != ":memory:"
        if sqlite_file and not Path(database).expanduser().is_file():  # connecting would create an empty one there
            raise InvalidInputError(f"SQL source database file {database} does not exist; check url.")
        try:
            connection = self.engine.connect()
        except sa.exc.SQLAlchemyError as error:
            raise InvalidInputError(
                f"SQL source could not connect to {where} ({reason(_driver_error(error))}); check url (host, port, "
                "database, user and password) and that the server is up."
            ) from None
        columns = ", ".join(self.table.c.keys())
        table = f"{s.db_schema}.{s.table}" if s.db_schema else s.table
        try:
            with connection:
                connection.execute(sa.select(self.table).limit(1)).first()
        except sa.exc.SQLAlchemyError as error:
            raise InvalidInputError(
                f"SQL source could not read columns {columns} of table {table} at {where} "
                f"({reason(_driver_error(error))}); check table, db_schema and the column names."
            ) from None

    def close(self) -> None:
        self.engine.dispose()

    def _col(self, name: str) -> sa.ColumnClause[Any]:
        return self.table.c[name]

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        s = self.settings
        query = sa.select(self.table)
        if s.updated_column:
            updated, key = self._col(s.updated_column), self._col(s.id_column)
            query = query.order_by(updated, key)
            if cursor is not None:
                query = query.where(updated >= _since(cursor, s.overlap_seconds))
        else:
            query = query.order_by(self._col(s.id_column))
        with self.engine.connect() as connection:
            result = connection.execution_options(stream_results=True, max_row_buffer=s.batch_size).execute(query)
            for row in result.mappings():
                yield self._document(row)
                if s.updated_column and row[s.updated_column] is not None:
                    yield CursorMark(cursor=_watermark(row[s.updated_column], s.updated_column))

    def _document(self, row: Any) -> Document | SkippedItem:
        s = self.settings
        external_id = str(row[s.id_column])
        parts = [str(row[column]) for column in s.text_columns if row[column] is not None]
        text = "\n\n".join(part for part in parts if part.strip())
        size = len(text.encode("utf-8"))
        if size > s.max_text_bytes:
            return SkippedItem(
                external_id=external_id,
                reason=f"row text is {size:,} bytes, over max_text_bytes {s.max_text_bytes:,}; raise it to index it",
            )
        if not text.strip():
            return SkippedItem(external_id=external_id, reason="no text in the text columns")
        updated = row[s.updated_column] if s.updated_column else None
        return Document(
            external_id=external_id,
            title=str(row[s.title_column] or "") if s.title_column else "",
            text=text,
            source=self.source_name,
            metadata={"table": s.table, **{c: _jsonable(row[c]) for c in s.metadata_columns}},
            acl_groups=self._principals(row),
            updated_at=_updated_at(updated),
        )

    def _principals(self, row: Any) -> list[str]:
        s = self.settings
        raw: Any = row[s.acl_column] if s.acl_column else s.groups
        if isinstance(raw, str):
            raw = [part for part in raw.split(",") if part.strip()]
        return principals_for(self.source_name, list(raw or []))

    def list_external_ids(self) -> Iterator[str]:
        """Every id in the table, read completely before the first is yielded (an error raises, deleting nothing)."""
        with self.engine.connect() as connection:
            ids = [str(value) for value in connection.execute(sa.select(self._col(self.settings.id_column))).scalars()]
        yield from ids

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        s = self.settings
        columns = [self._col(s.id_column)] + ([self._col(s.acl_column)] if s.acl_column else [])
        with self.engine.connect() as connection:
            rows = list(connection.execute(sa.select(*columns)).mappings())
        for row in rows:
            yield str(row[s.id_column]), self._principals(row)


def _driver_error(error: sa.exc.SQLAlchemyError) -> BaseException:
    """The driver's own error inside SQLAlchemy's wrapper (whose text appends the statement and a link)."""
    original = getattr(error, "orig", None)
    return original if isinstance(original, BaseException) else error


def _updated_at(value: Any) -> datetime | None:
    """An ``updated_column`` value as a UTC datetime, or None. SQLite (and any driver not told the column's type)
    hands back the text it stores, e.g. ``2026-11-23 01:02:03``; epoch seconds are numbers."""
    if isinstance(value, datetime):
        return _as_utc(value)
    if isinstance(value, str):
        try:
            return _as_utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    return None


def _watermark(value: Any, column: str) -> dict[str, Any]:
    """The cursor after a row: its ``updated_column`` value, kept in the column's own form (naive or aware datetime,
    ISO text, or a number of epoch seconds) so the next sync compares like with like in the database."""
    if isinstance(value, datetime | date):
        return {"watermark": value.isoformat()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"watermark": value, "form": "number"}
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInputError(
                f"Column {column!r} holds {value!r}, which is not an ISO timestamp; updated_column must be a "
                "timestamp, ISO text or epoch seconds."
            ) from None
        return {"watermark": value, "form": "text", "sep": "T" if "T" in value else " "}
    raise InvalidInputError(
        f"Column {column!r} holds a {type(value).__name__}; updated_column must be a timestamp, ISO text or epoch "
        "seconds."
    )


def _since(cursor: dict[str, Any], overlap_seconds: float) -> Any:
    """The lower bound of the next incremental read: the watermark less the overlap, in the watermark's own form."""
    watermark, form = cursor["watermark"], cursor.get("form")
    if form == "number":
        return watermark - overlap_seconds
    since = datetime.fromisoformat(watermark) - timedelta(seconds=overlap_seconds)
    return since.isoformat(sep=cursor.get("sep", "T")) if form == "text" else since


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)
