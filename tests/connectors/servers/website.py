"""A small intranet site served by uvicorn for the web connector tests: pages with ETag and Last-Modified
(conditional GET answers 304), a sitemap with lastmod, robots.txt, redirects, 404 and 410, and switches that make
it answer 503 (an outage) or 429 with ``Retry-After`` (rate limiting) for a number of requests.

Everything is mutable from the test (``Site.put``, ``Site.remove``...), so a test can edit the site between syncs.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route


@dataclass
class Page:
    title: str
    body: str
    modified: datetime
    content_type: str = "text/html; charset=utf-8"

    @property
    def html(self) -> str:
        if not self.content_type.startswith("text/html"):
            return self.body
        paragraphs = "".join(f"<p>{line}</p>" for line in self.body.split("\n") if line.strip())
        return (
            f"<html><head><title>{self.title}</title></head><body><nav><a href='/'>Home</a></nav>"
            f"<article><h1>{self.title}</h1>{paragraphs}</article><footer>Intranet</footer></body></html>"
        )

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.html.encode()).hexdigest()[:16] + '"'


@dataclass
class Site:
    pages: dict[str, Page] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    disallow: list[str] = field(default_factory=lambda: ["/private/"])
    outage: bool = False
    rate_limited: int = 0
    """The next this many requests answer 429 with ``Retry-After: 1``."""
    delay_s: float = 0.0
    """Seconds every page takes to answer (a slow site, so a test can kill a sync half-way)."""
    requests: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, path: str, title: str, body: str, content_type: str = "text/html; charset=utf-8") -> None:
        with self.lock:
            self.gone.discard(path)
            self.pages[path] = Page(title, body, datetime.now(UTC).replace(microsecond=0), content_type)

    def remove(self, path: str, *, gone: bool = True) -> None:
        with self.lock:
            self.pages.pop(path, None)
            if gone:
                self.gone.add(path)

    def sitemap(self, base: str) -> str:
        entries = "".join(
            f"<url><loc>{base}{path}</loc><lastmod>{page.modified.isoformat()}</lastmod></url>"
            for path, page in sorted(self.pages.items())
        )
        return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'

    def app(self) -> Starlette:
        async def handle(request: Request) -> Response:
            path = request.url.path
            if self.delay_s and path in self.pages:
                await asyncio.sleep(self.delay_s)
            response = self._answer(request, path)
            with self.lock:
                self.requests.append((path, response.status_code))
            return response

        return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "HEAD"])])

    def _answer(self, request: Request, path: str) -> Response:
        with self.lock:
            if self.rate_limited > 0:
                self.rate_limited -= 1
                return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "1"})
            if self.outage:
                return PlainTextResponse("down for maintenance", status_code=503)
            base = f"{request.url.scheme}://{request.url.netloc}"
            if path == "/robots.txt":
                rules = "".join(f"Disallow: {prefix}\n" for prefix in self.disallow)
                return PlainTextResponse(f"User-agent: *\n{rules}Sitemap: {base}/sitemap.xml\n")
            if path == "/sitemap.xml":
                return Response(self.sitemap(base), media_type="application/xml")
            if path in self.redirects:
                return RedirectResponse(self.redirects[path], status_code=301)
            if path in self.gone:
                return PlainTextResponse("gone", status_code=410)
            page = self.pages.get(path)
            if page is None:
                return PlainTextResponse("not found", status_code=404)
            headers = {"ETag": page.etag, "Last-Modified": format_datetime(page.modified, usegmt=True)}
            if request.headers.get("if-none-match") == page.etag:
                return Response(status_code=304, headers=headers)
            since = request.headers.get("if-modified-since")
            if since and "if-none-match" not in request.headers and parsedate_to_datetime(since) >= page.modified:
                return Response(status_code=304, headers=headers)
            return Response(page.html, media_type=page.content_type.split(";")[0], headers=headers)
