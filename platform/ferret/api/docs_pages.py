"""``/docs`` (Swagger UI) and ``/redoc`` served with their scripts and styles from this server, never a CDN.

Why: FastAPI's default pages load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from Google), so behind a
firewall, where Ferret is meant to run, they were blank pages. The assets come from the pinned ``fastapi-offline``
distribution (MIT; it ships Swagger UI under Apache-2.0 and ReDoc under MIT, as its README states), found by its
import spec so that serving the API does not import it. The pages are built by FastAPI's own page functions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")


def assets_folder() -> Path:
    """The folder of the vendored Swagger UI and ReDoc files inside the ``fastapi-offline`` distribution."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("fastapi-offline is not installed; `pip install ferret` pulls it in")
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    missing = [name for name in _ASSETS if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline at {folder} lacks {', '.join(missing)}")
    return folder


def install_docs_pages(app: FastAPI) -> None:
    """Serve the two documentation pages; create the app with ``docs_url=None, redoc_url=None``."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_folder()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} — API",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} — API reference",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
