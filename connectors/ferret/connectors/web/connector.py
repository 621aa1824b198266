"""Pages of an intranet site as documents: sitemap and start pages, robots.txt, conditional GET, host allow-list.

Discovery reads ``robots.txt`` (its ``Sitemap:`` lines, else ``/sitemap.xml``) and the sitemaps, plus the links of
the start pages up to ``max_depth``; a URL whose host is not in ``allowed_hosts`` is never fetched, and neither is
one robots.txt disallows (listed as skipped). Each page is fetched with ``If-None-Match``/``If-Modified-Since``
from the validators stored in the cursor: 304 is unchanged and costs no parsing; a sitemap ``lastmod`` equal to
the stored one skips the request entirely, once the stored copy was fetched after that ``lastmod``'s second (or
day) was over: an edit inside the same second keeps its ``lastmod``. 404 and 410 delete the page; other errors go
through the shared retry helper and then fail the sync (deleting nothing). Redirects are followed inside the
allow-list and the final URL is the document id. ``trafilatura`` extracts the main text.

Cursor: ``{"pages": {url: {"etag", "last_modified", "lastmod", "final", "fetched"}}, "after": url | None}``; a
mark follows every page (URLs go in sorted order), so an interrupted sync resumes after the last persisted page.

Permissions: ``acl`` maps URL prefixes to names (first match wins; no match is public), re-checked by a permission
pass so a config change re-permissions pages without re-embedding.
"""

from __future__ import annotations

import re
import urllib.robotparser
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.etree import ElementTree

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from selectolax.lexbor import LexborHTMLParser

from ferret.connectors.access import reason, redact_url
from ferret.connectors.principal_map import first_match
from ferret.connectors.retry import RetryBudgetExceededError, RetryPolicy, send_with_retry
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import (
    CursorMark,
    Deleted,
    IncompleteListingError,
    IncrementalConnector,
    PermissionPass,
    SyncItem,
)

_SITEMAP_NS = re.compile(r"^\{[^}]*\}")
_TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
_CHECK_BUDGET_S = 10.0
"""Longest ``check_access`` spends retrying one start URL (a sync has ``retry_budget_s``)."""


class WebConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start_urls: list[str] = Field(min_length=1)
    allowed_hosts: list[str] = Field(default_factory=list)
    sitemaps: list[str] = Field(default_factory=list)
    max_depth: int = Field(default=2, ge=0)
    max_pages: int = Field(default=10_000, gt=0)
    max_bytes: int = Field(default=5_000_000, gt=0)
    respect_robots: bool = True
    user_agent: str = "FerretBot/1.0"
    headers: dict[str, str] = Field(default_factory=dict)
    acl: dict[str, list[str]] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0)
    retry_budget_s: float = Field(default=120.0, gt=0)
    name: str | None = None


class WebConnector(IncrementalConnector, SlimConnector, PermissionPass):
    """Example:
    >>> connector = WebConnector(start_urls=["https://intranet.corp.example/"],
    ...                          acl={"https://intranet.corp.example/hr/": ["hr"]})
    """

    kind = "web"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = WebConfig(**config)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in error.errors())
            raise InvalidInputError(f"Invalid web connector config ({problems}).") from None
        for url in self.settings.start_urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise InvalidInputError(f"Start URL {url!r} is not an http(s) URL.")
        self.allowed = {host.lower() for host in self.settings.allowed_hosts} or {
            urlsplit(url).netloc.lower() for url in self.settings.start_urls
        }
        self.client = httpx.Client(
            headers={"User-Agent": self.settings.user_agent, **self.settings.headers},
            timeout=self.settings.timeout_s,
            follow_redirects=False,
        )
        self.policy = RetryPolicy(budget_s=self.settings.retry_budget_s)
        self._robots: dict[str, urllib.robotparser.RobotFileParser] = {}
        self._present: set[str] | None = None
        self._discovered: dict[str, str | None] | None = None

    def close(self) -> None:
        self.client.close()

    def check_access(self) -> None:
        """GET each start URL (with its host's robots.txt first when ``respect_robots``), one retry at most: the
        page must answer 2xx or 304, inside ``allowed_hosts``, and robots.txt must let ``user_agent`` fetch it."""
        policy = RetryPolicy(max_attempts=2, budget_s=min(self.settings.timeout_s, _CHECK_BUDGET_S))
        for url in self.settings.start_urls:
            shown = redact_url(url)
            try:
                if self.settings.respect_robots:
                    self._check_robots(url, shown, policy)
                response = self._get(url, policy=policy)
            except (httpx.HTTPError, RetryBudgetExceededError, IncompleteListingError) as error:
                raise InvalidInputError(
                    f"Web source start URL {shown} could not be fetched ({reason(error)}); check start_urls and that "
                    "the site is up."
                ) from None
            if response.is_redirect:
                target = response.headers.get("location", "")
                raise InvalidInputError(
                    f"Web source start URL {shown} redirects to {redact_url(target)}, outside allowed_hosts; start "
                    "from the final URL or add its host to allowed_hosts."
                )
            if response.status_code in (401, 403):
                raise InvalidInputError(
                    f"Web source start URL {shown} answered HTTP {response.status_code}; check headers (the "
                    "credentials the site wants)."
                )
            if response.status_code >= 400:
                raise InvalidInputError(
                    f"Web source start URL {shown} answered HTTP {response.status_code}; check start_urls."
                )

    def _check_robots(self, url: str, shown: str, policy: RetryPolicy) -> None:
        host = f"{urlsplit(url).scheme}://{urlsplit(url).netloc}"
        response = self._get(f"{host}/robots.txt", policy=policy)
        if response.status_code >= 500:
            raise InvalidInputError(
                f"Web source could not read {redact_url(host)}/robots.txt (HTTP {response.status_code}); a sync "
                "would stop there too: check the site, or set respect_robots: false."
            )
        parser = urllib.robotparser.RobotFileParser(f"{host}/robots.txt")
        parser.parse(response.text.splitlines() if response.status_code == 200 else [])
        if not parser.can_fetch(self.settings.user_agent, url):
            raise InvalidInputError(
                f"Web source start URL {shown} is disallowed by its robots.txt for {self.settings.user_agent!r}; "
                "start elsewhere, allow it there, or set respect_robots: false."
            )

    # -- HTTP ---------------------------------------------------------------------------------------------------
    def _allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and parts.netloc.lower() in self.allowed

    def _get(
        self, url: str, headers: dict[str, str] | None = None, policy: RetryPolicy | None = None
    ) -> httpx.Response:
        """GET following redirects inside the allow-list (at most 10); a redirect elsewhere is returned as is."""
        for _ in range(10):
            request = self.client.build_request("GET", url, headers=headers)
            response = send_with_retry(self.client, request, policy or self.policy)
            if response.is_redirect and "location" in response.headers:
                target = urldefrag(urljoin(url, response.headers["location"]))[0]
                if not self._allowed(target):
                    return response
                url = target
                continue
            return response
        raise IncompleteListingError(f"too many redirects from {url}")

    def _robot(self, url: str) -> urllib.robotparser.RobotFileParser:
        host = f"{urlsplit(url).scheme}://{urlsplit(url).netloc}"
        if host not in self._robots:
            parser = urllib.robotparser.RobotFileParser(f"{host}/robots.txt")
            response = self._get(f"{host}/robots.txt")
            if response.status_code >= 500:
                raise IncompleteListingError(f"{host}/robots.txt answered HTTP {response.status_code}")
            parser.parse(response.text.splitlines() if response.status_code == 200 else [])
            self._robots[host] = parser
        return self._robots[host]

    def _may_fetch(self, url: str) -> bool:
        return not self.settings.respect_robots or self._robot(url).can_fetch(self.settings.user_agent, url)

    # -- discovery ----------------------------------------------------------------------------------------------
    def _discover(self) -> dict[str, str | None]:
        """url -> sitemap lastmod (or None) of every page to visit; raises when a sitemap cannot be read."""
        if self._discovered is not None:
            return self._discovered
        found: dict[str, str | None] = {}
        sitemaps = list(self.settings.sitemaps)
        for start in self.settings.start_urls:
            robot = self._robot(start)
            host = f"{urlsplit(start).scheme}://{urlsplit(start).netloc}"
            sitemaps.extend(robot.site_maps() or [f"{host}/sitemap.xml"])
        seen_maps: set[str] = set()
        while sitemaps:
            sitemap = sitemaps.pop(0)
            if sitemap in seen_maps or not self._allowed(sitemap):
                continue
            seen_maps.add(sitemap)
            response = self._get(sitemap)
            if response.status_code == 404 and sitemap not in self.settings.sitemaps:
                continue  # a site without a sitemap: the start pages' links are the discovery
            if response.status_code != 200:
                raise IncompleteListingError(f"sitemap {sitemap} answered HTTP {response.status_code}")
            for kind, loc, lastmod in _parse_sitemap(response.content):
                if kind == "sitemap":
                    sitemaps.append(loc)
                elif self._allowed(loc):
                    found.setdefault(urldefrag(loc)[0], lastmod)
        frontier = [urldefrag(url)[0] for url in self.settings.start_urls]
        for depth in range(self.settings.max_depth + 1):
            next_frontier: list[str] = []
            for url in frontier:
                if (url in found and depth > 0) or len(found) >= self.settings.max_pages:
                    continue
                found.setdefault(url, None)
                if depth == self.settings.max_depth or not self._may_fetch(url):
                    continue
                response = self._get(url)
                if response.status_code == 200 and "html" in response.headers.get("content-type", ""):
                    next_frontier.extend(self._links(str(response.url), response.text))
            frontier = [url for url in next_frontier if url not in found]
        self._discovered = dict(sorted(found.items())[: self.settings.max_pages])
        return self._discovered

    def _links(self, base: str, html: str) -> list[str]:
        links = []
        for node in LexborHTMLParser(html).css("a[href]"):
            target = urldefrag(urljoin(base, node.attributes.get("href") or ""))[0]
            if self._allowed(target):
                links.append(target)
        return links

    # -- the port -----------------------------------------------------------------------------------------------
    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        pages: dict[str, dict[str, Any]] = dict((cursor or {}).get("pages", {}))
        after: str | None = (cursor or {}).get("after")
        present: set[str] = set()
        for url, lastmod in self._discover().items():
            known = pages.get(url, {})
            if after is not None and url <= after:
                present.add(known.get("final", url))
                continue
            item = self._visit(url, lastmod, known, pages)
            if isinstance(item, Deleted):
                pages.pop(url, None)
            else:
                present.add(pages.get(url, {}).get("final", url))
            if item is not None:
                yield item
            yield CursorMark(cursor={"pages": pages, "after": url})
        self._present = present
        yield CursorMark(cursor={"pages": pages, "after": None})

    def _visit(
        self, url: str, lastmod: str | None, known: dict[str, Any], pages: dict[str, dict[str, Any]]
    ) -> SyncItem | None:
        if not self._may_fetch(url):
            return SkippedItem(external_id=url, reason="disallowed by robots.txt")
        if lastmod is not None and known.get("lastmod") == lastmod and _fetched_after(known.get("fetched"), lastmod):
            return None  # the sitemap says it has not changed since the stored copy was fetched
        headers = {}
        if known.get("etag"):
            headers["If-None-Match"] = known["etag"]
        if known.get("last_modified"):
            headers["If-Modified-Since"] = known["last_modified"]
        response = self._get(url, headers)
        final = urldefrag(str(response.url))[0]
        if response.status_code == 304:
            pages[url] = {**known, "lastmod": lastmod}
            return None
        if response.status_code in (404, 410):
            return Deleted(external_id=known.get("final", url))
        if response.is_redirect:
            target = response.headers.get("location")
            return SkippedItem(external_id=url, reason=f"redirects outside the allowed hosts ({target})")
        if response.status_code != 200:
            raise IncompleteListingError(f"{url} answered HTTP {response.status_code}")
        pages[url] = {
            "etag": response.headers.get("etag"),
            "last_modified": response.headers.get("last-modified"),
            "lastmod": lastmod,
            "final": final,
            "fetched": response.headers.get("date"),
        }
        return self._document(final, response)

    def _document(self, url: str, response: httpx.Response) -> Document | SkippedItem:
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in _TEXT_TYPES:
            return SkippedItem(external_id=url, reason=f"content type {content_type or 'unknown'} is not indexed")
        if len(response.content) > self.settings.max_bytes:
            return SkippedItem(
                external_id=url,
                reason=f"page is {len(response.content):,} bytes, over max_bytes {self.settings.max_bytes:,}",
            )
        if content_type == "text/plain":
            title, text = url.rsplit("/", 1)[-1], response.text
        else:
            import trafilatura

            text = trafilatura.extract(response.text, url=url, include_comments=False, include_tables=True) or ""
            title_node = LexborHTMLParser(response.text).css_first("title")
            title = title_node.text(strip=True) if title_node is not None else ""
        if not text.strip():
            return SkippedItem(external_id=url, reason="no main text found on the page")
        return Document(
            external_id=url,
            title=title,
            text=text,
            source=self.source_name,
            metadata={"url": url},
            acl_groups=first_match(self.source_name, url, self.settings.acl, prefix=True),
        )

    def list_external_ids(self) -> Iterator[str]:
        """The pages present in the sync that just ran (its discovery raised if a sitemap failed)."""
        if self._present is None:
            raise IncompleteListingError("the web connector lists pages only after a complete sync pass")
        yield from sorted(self._present)

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        for url in self.list_external_ids():
            yield url, first_match(self.source_name, url, self.settings.acl, prefix=True)


def _fetched_after(fetched: str | None, lastmod: str) -> bool:
    """Whether a copy fetched at the server's ``Date`` *fetched* is newer than every edit a sitemap ``lastmod`` can
    stand for. ``lastmod`` is coarse (whole seconds, often a whole day): a page edited again within the same second
    or day keeps its ``lastmod``, so an unchanged value proves nothing unless the fetch came after that span ended.
    Unknown or unparsable times answer no: the page is then asked for with a conditional GET, which costs a 304."""
    if not fetched:
        return False
    try:
        fetched_at = parsedate_to_datetime(fetched)
        if len(lastmod) == 10:  # W3C date only: the span is the whole day
            span_end = datetime.fromisoformat(lastmod).replace(tzinfo=UTC) + timedelta(days=1)
        else:
            modified = datetime.fromisoformat(lastmod.replace("Z", "+00:00"))
            modified = modified if modified.tzinfo else modified.replace(tzinfo=UTC)
            span_end = modified.replace(microsecond=0) + timedelta(seconds=1)
    except (TypeError, ValueError):
        return False
    return fetched_at >= span_end


def _parse_sitemap(content: bytes) -> Iterator[tuple[str, str, str | None]]:
    """``("url" | "sitemap", loc, lastmod)`` of a sitemap or sitemap index (sitemaps.org protocol 0.9)."""
    try:
        root = ElementTree.fromstring(content)
    except ElementTree.ParseError as error:
        raise IncompleteListingError(f"sitemap is not valid XML ({error})") from None
    kind = "sitemap" if _SITEMAP_NS.sub("", root.tag) == "sitemapindex" else "url"
    for entry in root:
        fields = {_SITEMAP_NS.sub("", child.tag): (child.text or "").strip() for child in entry}
        if fields.get("loc"):
            yield kind, fields["loc"], fields.get("lastmod") or None
