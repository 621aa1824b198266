"""Schema-driven fuzzing (schemathesis) of every operation in the OpenAPI document with a valid admin key:
whatever the generated request, valid or not, the answer is never a 5xx.

``POST /v1/jobs`` is left out: a request that happened to name a task the fuzzer had just created would start a
training pipeline in a background thread; its input handling is covered by tests/api/test_jobs.py and
test_resources.py. ``POST /v1/corpora/{corpus}/realm`` likewise (a valid request starts REALM pre-training);
tests/api/test_realm_routes.py covers its input handling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.python.asgi import shutdown_lifespans

from ferret.api.app import create_app
from ferret.core.settings import FerretSettings

# The OpenAPI document depends on no data, so the schema is read from an app that never starts; the requests go to
# a started app on a fresh installation (fixture below).
schema = (
    schemathesis.openapi.from_dict(create_app(FerretSettings(home=Path("/nonexistent"))).openapi())
    .exclude(method="POST", path="/v1/jobs")
    .exclude(method="POST", path="/v1/corpora/{corpus}/realm")
)


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory, make_installation: Callable[[Path], Any]) -> Iterator[Any]:
    installation = make_installation(tmp_path_factory.mktemp("fuzz-home"))
    app = create_app(installation.settings)
    # schemathesis starts the app's lifespan on its first request and keeps it running; stop it (closing the
    # index backend) when the module is done.
    yield app, installation.keys["admin"]
    shutdown_lifespans()


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_gets_a_server_error(case: Any, fuzz_app: tuple[Any, str]) -> None:
    app, key = fuzz_app
    corpus = (case.path_parameters or {}).get("corpus")
    if isinstance(corpus, str):
        # Generated names almost never exist: send two of three requests to real corpora, so that searches and
        # pushes reach the index with generated queries, filters and documents.
        case.path_parameters["corpus"] = ("kb", "live", corpus)[len(corpus) % 3]
    response = case.call(app=app, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text}"
