"""Contract driver of the sql connector: a table per test in the PostgreSQL cluster the suite starts."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from connectors.contract.driver import Driver
from core.db.conftest import PostgresNotInstalled, start_postgres
from ferret.connectors.sql.connector import SqlConnector
from ferret_testing import free_port, skip_or_fail

KIND = "sql"
SUPPORTS_RATE_LIMITS = False
MAX_TEXT_BYTES = 4000


@contextmanager
def serve(tmp: Path) -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="ferret-pg-contract-"))  # reachable by the postgres user when root
    try:
        try:
            url, stop = start_postgres(folder)
        except PostgresNotInstalled as error:
            skip_or_fail(str(error), "`make system-deps` installs PostgreSQL")
        try:
            yield url
        finally:
            stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class SqlDriver(Driver):
    kind = "sql"

    def __init__(self, url: str, source: str) -> None:
        super().__init__(source)
        self.url, self.table = url, f"docs_{source}"
        self.engine = sa.create_engine(url)
        self.down = False
        with self.engine.begin() as connection:
            connection.execute(
                sa.text(
                    f"CREATE TABLE {self.table} (id text PRIMARY KEY, title text, body text, teams text, "
                    "updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
            )

    def _run(self, statement: str, **params: Any) -> None:
        with self.engine.begin() as connection:
            connection.execute(sa.text(statement), params)

    def connector(self) -> SqlConnector:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none" if self.down else self.url
        return SqlConnector(
            name=self.source,
            url=url,
            table=self.table,
            title_column="title",
            text_columns=["body"],
            updated_column="updated_at",
            acl_column="teams",
            overlap_seconds=0,
            max_text_bytes=MAX_TEXT_BYTES,
        )

    def create(self, key: str, title: str, text: str) -> str:
        self._run(
            f"INSERT INTO {self.table} (id, title, body, teams) VALUES (:id, :title, :body, 'staff')",
            id=key,
            title=title,
            body=text,
        )
        return key

    def edit(self, key: str, text: str) -> None:
        self._run(
            f"UPDATE {self.table} SET body = :body, updated_at = clock_timestamp() WHERE id = :id", id=key, body=text
        )

    def rename(self, key: str, new_key: str) -> str:
        self._run(
            f"UPDATE {self.table} SET id = :new, updated_at = clock_timestamp() WHERE id = :id", id=key, new=new_key
        )
        return new_key

    def delete(self, key: str) -> None:
        self._run(f"DELETE FROM {self.table} WHERE id = :id", id=key)

    def set_groups(self, key: str, groups: list[str]) -> None:
        # updated_at is left alone, as an ACL edit in many schemas does: the permission pass must see it.
        self._run(f"UPDATE {self.table} SET teams = :teams WHERE id = :id", id=key, teams=",".join(groups))

    def create_oversized(self, key: str) -> str:
        return self.create(key, "Huge", "glacier " * MAX_TEXT_BYTES)

    def outage(self, down: bool) -> None:
        self.down = down

    def close(self) -> None:
        self.engine.dispose()


def make_driver(server: str, tmp: Path, source: str) -> SqlDriver:
    return SqlDriver(server, source)
