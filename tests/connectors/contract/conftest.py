"""Fixtures of the connector contract suite: one server per driver kind for the session, a fresh driver namespace
and a fresh Ferret installation per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.contract.catalog import driver_modules
from connectors.contract.driver import Driver
from connectors.contract.harness import Harness
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import FerretSettings

MODULES = driver_modules()
_names = itertools.count()


@pytest.fixture(scope="session", params=sorted(MODULES))
def contract_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any]]:
    kind = request.param
    with MODULES[kind].serve(tmp_path_factory.mktemp(f"server-{kind}")) as server:
        yield kind, server


@pytest.fixture
def driver(contract_server: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    kind, server = contract_server
    made: Driver = MODULES[kind].make_driver(server, tmp_path_factory.mktemp(f"driver-{kind}"), f"{kind}{next(_names)}")
    yield made
    made.close()


@pytest.fixture
def harness(settings: FerretSettings, session: Session, driver: Driver) -> Iterator[Harness]:
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        yield Harness.create(settings, session, backend, driver.source)
    finally:
        backend.close()
