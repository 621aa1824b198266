"""Where the terminal client's results come from: the local store (the domain's ``Searcher``) or a remote API.

Both clients answer with the same plain records, so the screens never know which one they talk to. Every failure
a user can cause or meet (an unknown corpus, an unreachable API, a revoked key) is a ``FerretError`` with one
sentence; the app shows it and keeps running.

Example:
    >>> client = RemoteSearchClient("http://127.0.0.1:8000", api_key=os.environ["FERRET_API_KEY"])
    >>> [hit.title for hit in client.search("handbook", "parental leave", configuration="hybrid")]
    ['Leave policy', ...]
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from ferret.core.db.corpus import get_corpus, list_corpora
from ferret.core.db.models import Document
from ferret.core.db.search_config import list_search_configs
from ferret.core.db.source import expand_principals
from ferret.core.errors import FerretError, ForbiddenError, InvalidInputError, NotFoundError
from ferret.core.index.types import parse_mode
from ferret.core.search.configuration import plan_by_name
from ferret.ui.runtime import open_context

CONFIGURATIONS = ("hybrid", "dense", "sparse")
"""The search modes a user can switch between: BM25 and dense fused (``DEFAULT_FUSION`` unless a configuration
tuned it), dense only, BM25 only."""
RESULTS = 10
CONTEXT_PASSAGES = 2
"""Passages shown before and after the matching one in the document view."""


@dataclass(frozen=True)
class Hit:
    """One result: a document and its best passage."""

    corpus: str
    document_id: int
    external_id: str
    title: str
    text: str
    score: float
    source: str
    passage_id: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def link(self) -> str:
        """The document's own address when its source gave one, else a ``ferret://`` reference to it."""
        for key in ("url", "link", "web_url"):
            value = self.metadata.get(key)
            if isinstance(value, str) and value:
                return value
        return f"ferret://{self.corpus}/{self.source}/{self.external_id}"


@dataclass(frozen=True)
class DocumentView:
    """A document around one hit: its passages (only the neighbours of the hit for a long one) and metadata."""

    title: str
    passages: tuple[str, ...]
    hit_position: int
    """Index in ``passages`` of the passage that matched."""
    details: tuple[tuple[str, str], ...]
    """(label, value) rows: source, id, link, groups, metadata."""


class SearchClient(Protocol):
    """What the app needs from a store. Implementations are called from worker threads."""

    target: str
    """A short description of where searches go, shown in the status line."""
    notice: str
    """Why the last ``configurations`` answer offered less than there is (empty when it did not)."""
    active: str
    """The stored configuration that the corpus's search runs now (``config 3``), as the last ``configurations``
    answer said; empty when none is active (the untrained default serves)."""

    def corpora(self) -> list[str]: ...

    def search(self, corpus: str, query: str, *, configuration: str, k: int = RESULTS) -> list[Hit]: ...

    def configurations(self, corpus: str | None) -> list[str]: ...

    def document(self, hit: Hit) -> DocumentView: ...

    def close(self) -> None: ...


def _details(hit: Hit, extra: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    rows = [("corpus", hit.corpus), ("source", hit.source), ("id", hit.external_id), ("link", hit.link)]
    rows += list((extra or {}).items())
    rows += [(f"metadata.{key}", str(value)) for key, value in sorted(hit.metadata.items())]
    return tuple(rows)


def in_context(hit: Hit, texts: list[str], ids: list[int], extra: dict[str, str]) -> DocumentView:
    """The hit's passage with ``CONTEXT_PASSAGES`` neighbours on each side, as both clients show a document."""
    position = ids.index(hit.passage_id) if hit.passage_id in ids else 0
    first = max(0, position - CONTEXT_PASSAGES)
    shown = tuple(texts[first : position + CONTEXT_PASSAGES + 1]) or (hit.text,)
    rows = {**extra, "passage": f"{position + 1} of {len(texts)}"}
    return DocumentView(hit.title, shown, position - first, _details(hit, rows))


def split_configuration(configuration: str) -> tuple[str, str | None]:
    """(search mode, stored configuration or None): a stored one (``config 2``) runs in hybrid mode, because its
    fusion weighs the BM25 and the dense hits."""
    if configuration.startswith(STORED_PREFIX):
        return "hybrid", configuration.removeprefix(STORED_PREFIX)
    return check_configuration(configuration), None


def _check_query(query: str) -> str:
    if not query.strip():
        raise InvalidInputError("The query is empty; type a few words to search for.")
    return query.strip()


STORED_PREFIX = "config "
"""A stored search configuration in the switcher: ``config base`` or ``config <version>`` (``ferret config``)."""


def check_configuration(configuration: str) -> str:
    if configuration not in CONFIGURATIONS:
        raise InvalidInputError(f"Unknown configuration {configuration!r}; use one of {', '.join(CONFIGURATIONS)}.")
    return configuration


class LocalSearchClient:
    """Searches the store of this machine (``FERRET_HOME`` or the configured servers) through ``Searcher``.

    The application context (settings, session, index backend) stays open for the app's life: opening Qdrant Edge
    and loading the encoder once keeps search-as-you-type fast. Calls are serialised by a lock, because the
    session and the embedded index belong to one thread at a time, and each call starts a fresh transaction so
    a promotion made elsewhere is seen at the next keystroke.
    """

    def __init__(self, groups: list[str] | None = None, *, all_groups: bool = False) -> None:
        """As ``ferret search``: ``public`` only, plus the ``groups`` named (a principal such as ``user:ann@corp``
        also as the groups the sources reported for it), or every document with ``all_groups``."""
        self._stack = ExitStack()
        self._context = self._stack.enter_context(open_context())
        self._lock = threading.Lock()
        if all_groups:
            self._acl_groups: list[str] | None = None
            seen = "all groups"
        else:
            self._acl_groups = expand_principals(self._context.session, groups) if groups else []
            seen = f"public + {', '.join(groups)}" if groups else "public only"
        self.target = f"local store ({seen})"
        self.notice = ""
        self.active = ""

    def corpora(self) -> list[str]:

        with self._lock:
            self._context.session.rollback()
            return [corpus.name for corpus in list_corpora(self._context.session)]

    def configurations(self, corpus: str | None) -> list[str]:
        """The modes, then the corpus's stored search configurations: ``config base`` and one per version."""
        if corpus is None:
            return list(CONFIGURATIONS)
        with self._lock:
            self._context.session.rollback()
            stored = list_search_configs(self._context.session, get_corpus(self._context.session, corpus))
        self.active = next((f"{STORED_PREFIX}{c.version}" for c in stored if c.active), "")
        return [*CONFIGURATIONS, f"{STORED_PREFIX}base", *(f"{STORED_PREFIX}{c.version}" for c in stored)]

    def search(self, corpus: str, query: str, *, configuration: str, k: int = RESULTS) -> list[Hit]:

        text = _check_query(query)
        mode_name, stored = split_configuration(configuration)
        mode = parse_mode(mode_name)
        with self._lock:
            context = self._context
            context.session.rollback()
            plan = None
            if stored is not None:
                plan = plan_by_name(context.session, get_corpus(context.session, corpus), stored)
            results = context.searcher.search(corpus, text, k=k, mode=mode, plan=plan, acl_groups=self._acl_groups)
        return [
            Hit(
                corpus=corpus,
                document_id=r.document_id,
                external_id=r.external_id,
                title=r.title,
                text=r.text,
                score=r.score,
                source=r.source,
                passage_id=r.passage_id,
                metadata=r.metadata,
            )
            for r in results
        ]

    def document(self, hit: Hit) -> DocumentView:

        with self._lock:
            session = self._context.session
            session.rollback()
            document = session.get(Document, hit.document_id)
            if document is None:
                raise NotFoundError(f"Document {hit.external_id!r} is no longer in corpus {hit.corpus!r}.")
            texts = [passage.text for passage in document.passages]
            ids = [passage.id for passage in document.passages]
            groups = ", ".join(document.acl_groups) or "public"
        return in_context(hit, texts, ids, {"groups": groups})

    def close(self) -> None:
        self._stack.close()


class RemoteSearchClient:
    """Searches through a Ferret HTTP API with an API key (sent as ``Authorization: Bearer``).

    The document view reads the document route (its passages, within the key's groups) and shows the hit among
    its neighbours as the local client does. Stored search configurations are listed by an admin route: with a
    key without the admin scope the switcher offers the modes only, and says why.
    """

    def __init__(
        self, base_url: str, *, api_key: str | None, key_variable: str = "FERRET_API_KEY", timeout_s: float = 10.0
    ) -> None:
        import httpx

        if not base_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"--api {base_url!r} is not an http(s) URL, e.g. http://127.0.0.1:8000.")
        if not api_key:
            raise InvalidInputError(f"No API key: set {key_variable} to a key from `ferret apikey create`.")
        self.base_url = base_url.rstrip("/")
        self.target = self.base_url
        self.key_variable = key_variable
        self.notice = ""
        """Why the last answer offered less than asked (a key without the admin scope), shown in the status line."""
        self.active = ""
        self._http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s
        )

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, expect: tuple[str, ...] = ()
    ) -> Any:
        """The JSON answer, which must hold the keys in ``expect``: another server at the URL (a proxy's login
        page, another service's port) is one sentence, not a traceback."""
        import httpx

        try:
            response = self._http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise FerretError(f"The API at {self.base_url} did not answer in time; try again.") from None
        except httpx.HTTPError:
            raise FerretError(
                f"Cannot reach the API at {self.base_url}; check --api and that the server runs."
            ) from None
        if response.status_code == 401:
            raise FerretError(f"The API refused the key (wrong or revoked); set {self.key_variable} to a valid key.")
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", ""))
            except ValueError:
                detail = ""
            kind = {403: ForbiddenError, 404: NotFoundError}.get(response.status_code, FerretError)
            raise kind(detail or f"The API answered {response.status_code} to {method} {path}.")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or any(key not in answer for key in expect):
            raise FerretError(
                f"{self.base_url} did not answer {method} {path} as a Ferret API does; check --api (e.g. "
                "http://127.0.0.1:8000)."
            )
        return answer

    def corpora(self) -> list[str]:
        return [str(corpus["name"]) for corpus in self._request("GET", "/v1/corpora", expect=("corpora",))["corpora"]]

    def configurations(self, corpus: str | None) -> list[str]:
        """The modes, then the corpus's stored search configurations (``GET .../search-configs``, admin scope)."""
        if corpus is None:
            return list(CONFIGURATIONS)
        self.notice, self.active = "", ""
        try:
            answer = self._request("GET", f"/v1/corpora/{quote(corpus, safe='')}/search-configs", expect=("configs",))
        except ForbiddenError:
            self.notice = "Stored search configurations are listed for admin keys only; the modes are offered."
            return list(CONFIGURATIONS)
        stored = [f"{STORED_PREFIX}{config['version']}" for config in answer["configs"]]
        self.active = next((f"{STORED_PREFIX}{c['version']}" for c in answer["configs"] if c.get("active")), "")
        return [*CONFIGURATIONS, f"{STORED_PREFIX}base", *stored]

    def search(self, corpus: str, query: str, *, configuration: str, k: int = RESULTS) -> list[Hit]:
        mode, stored = split_configuration(configuration)
        body: dict[str, Any] = {"query": _check_query(query), "k": k, "mode": mode}
        if stored is not None:
            body["config"] = stored
        answer = self._request("POST", f"/v1/corpora/{quote(corpus, safe='')}/search", body, expect=("results",))
        return [
            Hit(
                corpus=corpus,
                document_id=int(r["document_id"]),
                external_id=str(r["external_id"]),
                title=str(r["title"]),
                text=str(r["text"]),
                score=float(r["score"]),
                source=str(r["source"]),
                passage_id=int(r["passage_id"]),
                metadata=dict(r.get("metadata") or {}),
            )
            for r in answer["results"]
        ]

    def document(self, hit: Hit) -> DocumentView:
        try:
            path = f"/v1/corpora/{quote(hit.corpus, safe='')}/documents/{hit.document_id}"
            answer = self._request("GET", path, expect=("passages", "acl_groups"))
        except NotFoundError:
            # The API's sentence names the document by its internal number; the reader knows it by its id.
            raise NotFoundError(
                f"Document {hit.external_id!r} is no longer in corpus {hit.corpus!r} (or this key may not read it)."
            ) from None
        passages = answer["passages"]
        extra = {"groups": ", ".join(answer["acl_groups"]), "api": self.base_url}
        return in_context(hit, [str(p["text"]) for p in passages], [int(p["id"]) for p in passages], extra)

    def close(self) -> None:
        self._http.close()
