"""A throwaway PostgreSQL cluster for the database tests, started from the Debian ``postgresql`` package.

``start_postgres`` runs ``initdb`` and ``pg_ctl`` on 127.0.0.1 and a free port, with its socket in its own
folder and fsync off; as root it runs them as the ``postgres`` OS user (PostgreSQL refuses to run as root).
Without the binaries the tests are skipped on a workstation and fail when ``CI`` is set: CI must run them.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, pool, text

from ferret_testing import free_port, skip_or_fail

DATABASE = "ferret_test"


class PostgresNotInstalled(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def _find_bin_dir() -> Path:
    """The ``bin`` folder of the newest PostgreSQL under /usr/lib/postgresql, else the one on PATH."""

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", bin_dir.parent.name))

    candidates = [path for path in Path("/usr/lib/postgresql").glob("*/bin") if (path / "pg_ctl").exists()]
    if candidates:
        return max(candidates, key=version)
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl and shutil.which("initdb"):
        return Path(pg_ctl).parent
    raise PostgresNotInstalled(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/pg_ctl, no pg_ctl on PATH): "
        "install the Debian package `postgresql`."
    )


def start_postgres(tmp_dir: Path) -> tuple[str, Callable[[], None]]:
    """Start a PostgreSQL cluster under ``tmp_dir`` and create the database ``ferret_test`` in it.

    Returns the SQLAlchemy URL of that database and a function that stops the cluster. As root, ``tmp_dir``
    is handed to the ``postgres`` user, so it must be reachable by that user (e.g. a fresh folder in /tmp,
    not one under pytest's private ``/tmp/pytest-of-root``). Raises ``PostgresNotInstalled`` when the server
    binaries are missing.
    """
    bin_dir = _find_bin_dir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresNotInstalled(
                "Running as root but there is no `postgres` OS user to run the server."
            ) from None
        as_user = ["runuser", "-u", "postgres", "--"]
        os.chown(tmp_dir, account.pw_uid, account.pw_gid)
    data_dir, log_file = tmp_dir / "data", tmp_dir / "server.log"

    def run(*args: str) -> None:
        result = subprocess.run([*as_user, *args], cwd=tmp_dir, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = log_file.read_text(errors="replace") if log_file.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}{log}")

    initdb, pg_ctl = str(bin_dir / "initdb"), str(bin_dir / "pg_ctl")
    run(
        initdb,
        f"--pgdata={data_dir}",
        "--username=postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--no-locale",
        "--no-sync",
    )

    port = 0
    for attempt in range(3):  # Another process may take the free port between the probe and the start.
        port = free_port()
        options = (
            f"-F -c fsync=off -c synchronous_commit=off -c full_page_writes=off -p {port} "
            f"-c listen_addresses=127.0.0.1 -k {tmp_dir}"
        )
        try:
            run(pg_ctl, "-D", str(data_dir), "-l", str(log_file), "-w", "-t", "60", "-o", options, "start")
            break
        except RuntimeError:
            if attempt == 2:
                raise

    def stop() -> None:
        run(pg_ctl, "-D", str(data_dir), "-m", "fast", "-w", "stop")

    try:
        admin = create_engine(
            f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
            poolclass=pool.NullPool,
            isolation_level="AUTOCOMMIT",
        )
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {DATABASE}"))
        admin.dispose()
    except BaseException:
        stop()
        raise
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{DATABASE}", stop


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of an empty database ``ferret_test`` on a PostgreSQL cluster that lives for the test session."""
    tmp_dir = Path(tempfile.mkdtemp(prefix="ferret-pg-"))
    try:
        try:
            url, stop = start_postgres(tmp_dir)
        except PostgresNotInstalled as error:
            skip_or_fail(str(error), "`make system-deps` installs PostgreSQL")
        try:
            yield url
        finally:
            stop()
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


@pytest.fixture
def pg_database_url(postgres_url: str) -> str:
    """The session's PostgreSQL database, emptied: each test starts from a database with no tables."""
    engine = create_engine(postgres_url, poolclass=pool.NullPool)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return postgres_url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each backend: a SQLite file, then the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'ferret.db'}"
    url: str = request.getfixturevalue("pg_database_url")
    return url
