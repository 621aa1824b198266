"""The FastAPI application: one runtime (engine, session factory, index backend, job queue) per application, opened
in the lifespan.

Example:
    >>> from fastapi.testclient import TestClient
    >>> with TestClient(create_app(FerretSettings(home="/tmp/ferret"))) as client:
    ...     client.get("/health").json()["status"]
    'ok'

``ferret serve`` runs ``app_from_environment`` under uvicorn (settings from ``FERRET_*``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI, status
from fastapi.responses import JSONResponse
from sqlalchemy import text

from ferret.api.body_limit import BodySizeLimitMiddleware
from ferret.api.dependencies import StateDep
from ferret.api.docs_pages import install_docs_pages
from ferret.api.errors import install_error_handlers
from ferret.api.routers import (
    api_keys,
    ask,
    audit,
    corpora,
    documents,
    index_versions,
    jobs,
    realm,
    search,
    search_configs,
    sources,
    tasks,
)
from ferret.api.schemas import HealthOut
from ferret.core.settings import FerretSettings, get_settings
from ferret.runtime.context import open_runtime

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DESCRIPTION = """Search corpora trained on your own documents, push documents from connectors, and run the platform.

Every route but `/health` needs an API key (`Authorization: Bearer fk_…` or `X-API-Key: fk_…`) with a scope:
`search`, `ingest`, `admin` (which implies them) or `owner` (admin, and may grant any group: an admin key manages only
keys within its own groups). Create keys with `ferret apikey create`; `/v1/audit-events` lists who changed keys and
index versions.
Search only returns documents shared with one of the key's ACL groups or public, for every key."""


def create_app(settings: FerretSettings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with open_runtime(settings) as runtime:
            app.state.ferret = runtime
            yield

    app = FastAPI(
        title="Ferret",
        version=version("ferret"),
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # install_docs_pages serves both pages with assets from this server, not a CDN
        redoc_url=None,
    )
    install_docs_pages(app)
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=settings.api_max_body_bytes)
    install_error_handlers(app)
    for module in (search, documents, corpora, tasks, jobs, index_versions, search_configs, api_keys, sources, audit):
        app.include_router(module.router)
    app.include_router(realm.router)  # REALM pre-training and answers with provenance (issue 13)
    app.include_router(ask.router)

    @app.get(
        "/health",
        response_model=HealthOut,
        tags=["health"],
        summary="Liveness and database check (no API key)",
        responses={503: {"model": HealthOut, "description": "The database does not answer."}},
    )
    def health(state: StateDep) -> HealthOut | JSONResponse:
        """Used by compose health checks: 200 when the database answers a query, 503 otherwise."""
        try:
            with state.sessions() as session:
                session.execute(text("SELECT 1"))
        except Exception as exc:
            body = HealthOut(status="unavailable", database=type(exc).__name__, version=app.version)
            return JSONResponse(body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
        return HealthOut(status="ok", database="ok", version=app.version)

    return app


def app_from_environment() -> FastAPI:
    """The uvicorn factory of ``ferret serve``: settings from the ``FERRET_*`` environment."""
    return create_app(get_settings())
