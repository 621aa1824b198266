"""``/docs`` and ``/redoc`` work behind a firewall: every script, style and icon they load comes from this server
(issue 11, item 5: FastAPI's default pages loaded Swagger UI from a CDN and showed a blank page offline)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(("page", "script"), [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
def test_the_docs_pages_load_everything_from_the_server(client: TestClient, page: str, script: str) -> None:
    response = client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "//" not in re.sub(r"<!--.*?-->", "", html, flags=re.S).replace("://", "")  # no protocol-relative URL
    assert not re.search(r"https?://", html), re.findall(r"https?://[^\s\"']+", html)
    urls = re.findall(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']""", html) + re.findall(
        r"""url:\s*'([^']+)'""", html
    )
    scripts = re.findall(r"""<script[^>]*src\s*=\s*["']([^"']+)["']""", html)
    assert any(s.endswith(script) for s in scripts), scripts
    assert urls and all(url.startswith("/") for url in urls), urls
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        if url.endswith(".js"):
            assert "javascript" in asset.headers["content-type"] and len(asset.content) > 100_000, url
