"""Search a corpus: encode the query, query Qdrant (access filter inside the query), return documents.

Qdrant ranks passages; a document is as relevant as its best passage (MaxP), so results are deduplicated by
document after the query. Access control is never applied after the query: the ``acl_groups`` condition is part
of the Qdrant filter, prefetches included.

One ``Searcher`` per process (the runtime builds it): it holds, as its own state, which model embedded each
collection (a collection is built by one model for life) and the BM25 query encoder, so the hot path runs no SQL.
The alias is resolved once per query; the collection it names is what is queried.

Example:
    >>> searcher = Searcher(settings, backend, sessions)  # sessions: a sessionmaker, used on a cache miss only
    >>> for hit in searcher.search("handbook", "parental leave", k=5, acl_groups=["hr"]):
    ...     print(hit.title, hit.score)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.acl import search_groups
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import active_index_version, find_index_version_by_collection
from ferret.core.db.models import IndexState, IndexVersion
from ferret.core.encoder.onnx_query_encoder import OnnxQueryEncoder
from ferret.core.encoder.query_batcher import QueryBatcher
from ferret.core.encoder.query_encoder import query_encoder
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.index.backend import IndexBackend, UnreadableCollectionError
from ferret.core.index.sparse import SparseEncoder
from ferret.core.index.types import (
    SearchHit,
    SearchMode,
    SearchRequest,
    ids_needing_payload,
    parse_mode,
    with_payloads,
)
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.rerank.cross_encoder import rerank
from ferret.core.search.configuration import ActivePlans, SearchPlan
from ferret.core.search.fusion import DEFAULT_FUSION, Fusion, fuse
from ferret.core.settings import FerretSettings

# Passages fetched per wanted document before deduplication by document.
_PASSAGES_PER_DOCUMENT = 3
MAX_K = 1000
MAX_PASSAGES = 10_000
_MAX_DEEPENING = 2

SessionSource = Callable[[], AbstractContextManager[Session]]
"""Opens a session for the lookups of a cache miss: a ``sessionmaker``, or ``Searcher.over``'s held session."""


@dataclass(frozen=True)
class SearchResult:
    document_id: int
    external_id: str
    title: str
    text: str
    score: float
    passage_id: int
    source: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hit(cls, hit: SearchHit) -> SearchResult:
        payload = hit.payload
        return cls(
            document_id=int(payload["document_id"]),
            external_id=str(payload["external_id"]),
            title=str(payload.get("title", "")),
            text=str(payload.get("text", "")),
            score=hit.score,
            passage_id=int(payload["passage_id"]),
            source=str(payload.get("source", "")),
            metadata=dict(payload.get("metadata") or {}),
        )


def dedupe_by_document(hits: Sequence[SearchHit], k: int) -> list[SearchResult]:
    results: list[SearchResult] = []
    seen: set[int] = set()
    for hit in hits:
        result = SearchResult.from_hit(hit)
        if result.document_id not in seen:
            seen.add(result.document_id)
            results.append(result)
            if len(results) == k:
                break
    return results


def fused_search(
    backend: IndexBackend, target: str, requests: Sequence[SearchRequest], fusion: Fusion
) -> list[list[SearchHit]]:
    """Hybrid requests as two first-stage queries each (dense and BM25, the prefetch depth deep, each with the
    access filter inside Qdrant's query), fused here: Qdrant fuses by rank only (RRF, DBSF), not by a weighted
    combination of normalised scores (``ferret.core.search.fusion``). Other modes pass through.

    The first-stage queries return no payloads: the payloads of the fused hits that are kept (``limit`` of up to
    twice the prefetch depth) are read afterwards in one request (issue 16)."""
    batch: list[SearchRequest] = []
    for request in requests:
        if request.mode == "hybrid":
            batch.append(replace(request, mode="dense", limit=request.candidates, with_payload=False))
            batch.append(replace(request, mode="sparse", limit=request.candidates, with_payload=False))
        else:
            batch.append(request)
    answers = iter(backend.search_batch(target, batch) if len(batch) > 1 else [backend.search(target, batch[0])])
    hits = []
    for request in requests:
        if request.mode == "hybrid":
            dense, sparse = next(answers), next(answers)
            hits.append(fuse(dense, sparse, fusion, limit=request.limit, rrf_k=request.rrf_k, depth=request.candidates))
        else:
            hits.append(next(answers))
    # The fused (hybrid) requests are those whose payloads come afterwards (``SearchRequest.payload_after``); a point
    # deleted between the query and the read (a concurrent update) is dropped by ``with_payloads``.
    wanted = ids_needing_payload(hits, requests)
    return with_payloads(hits, requests, backend.payloads(target, wanted)) if wanted else hits


_TURN_MAX_QUERIES = 16
"""Searches of up to this many queries take turns for the first stage (``Searcher._first_stage_lock``)."""


class Searcher:
    def __init__(self, settings: FerretSettings, backend: IndexBackend, sessions: SessionSource) -> None:
        self.settings = settings
        self.backend = backend
        self.sessions = sessions
        self.model_of_collection: dict[str, str] = {}
        """Collection → folder of the model that embedded it; filled on first use, never stale (see ``_resolve``)."""
        # BM25 query vectors weigh each distinct query term 1; length normalization only shapes document vectors.
        self.query_bm25 = SparseEncoder()
        self.active_plans = ActivePlans()
        """The active search configuration of each corpus, kept a couple of seconds (``ActivePlans``)."""
        self.query_batchers: dict[str, QueryBatcher] = {}
        """Model folder → the batcher that encodes concurrent searches' queries together (one worker thread each)."""
        self._batchers_lock = threading.Lock()
        self._first_stage_lock = threading.Lock() if backend.serial_queries else None
        """Concurrent searches take turns for the first stage (query, hits, fusion, payloads) on a backend whose
        queries hold the GIL: it is serial work either way, and 32 threads contending for it ran 85-116 searches/s
        at 100k passages on 2 cores against 126-148 taking turns (benchmarks/RESULTS.md, seventeenth session)."""

    @classmethod
    def over(cls, session: Session, settings: FerretSettings, backend: IndexBackend) -> Searcher:
        """A searcher that does its lookups in a session the caller holds (evaluation, tests)."""
        return cls(settings, backend, lambda: nullcontext(session))

    def mode(self, mode: str | None) -> SearchMode:
        """The search mode of a request: the one asked for, else the configured default (``FERRET_SEARCH_MODE``).

        An API caller may send any string: an unknown mode is refused rather than replaced by the default."""
        return parse_mode(mode) or self.settings.search_mode

    def _resolve(self, corpus_name: str, index_version: IndexVersion | None) -> tuple[str, str]:
        """(collection to query, folder of the model that embedded it).

        The alias is resolved once and the collection itself is queried, so the query vector always comes from the
        model of the collection it searches, even while a promotion swaps the alias. A collection is built by one
        model for life, so that mapping is kept by the searcher and the hot path runs no SQL."""
        if index_version is not None:
            if index_version.state not in (IndexState.READY, IndexState.ACTIVE):
                raise ConflictError(
                    f"Index version {index_version.version} is {index_version.state.value} and cannot be searched."
                )
            return index_version.collection, index_version.model_version.path
        collection = self.backend.resolve_alias(corpus_name)
        if collection is not None and collection in self.model_of_collection:
            return collection, self.model_of_collection[collection]
        with self.sessions() as session:
            corpus = get_corpus(session, corpus_name)
            active = active_index_version(session, corpus)
            if active is None or collection is None:
                raise ConflictError(
                    f"Corpus {corpus.name!r} has no active index; "
                    f"run `ferret index build --corpus {corpus.name} --promote`.",
                    over_http=f"Corpus {corpus.name!r} has no active index; build one with POST "
                    f'/v1/corpora/{corpus.name}/index-versions and {{"promote": true}}.',
                )
            built = active if active.collection == collection else find_index_version_by_collection(session, collection)
            if built is None:
                raise ConflictError(
                    f"The alias of corpus {corpus.name!r} points at an unknown collection {collection!r}."
                )
            path = built.model_version.path
        self.model_of_collection[collection] = path
        return collection, path

    def query_batcher(self, model_path: str) -> QueryBatcher:
        """The batcher of a model's queries: concurrent searches (API threads) are encoded in one forward pass."""
        with self._batchers_lock:
            batcher = self.query_batchers.get(model_path)
            if batcher is None:
                encoder = query_encoder(model_path, self.settings)
                batch_size = self.settings.encode_batch_size
                batcher = QueryBatcher(
                    lambda texts: encoder.encode_queries(texts, batch_size=batch_size),
                    window_s=self.settings.query_batch_window_ms / 1000,
                    max_batch=self.settings.query_batch_max,
                    # ONNX Runtime runs batches side by side; torch's tower takes one forward pass at a time.
                    workers=self.settings.query_encoder_workers if isinstance(encoder, OnnxQueryEncoder) else 1,
                )
                self.query_batchers[model_path] = batcher
            return batcher

    def close(self) -> None:
        """Stop the query batchers' worker threads."""
        with self._batchers_lock:
            batchers, self.query_batchers = list(self.query_batchers.values()), {}
        for batcher in batchers:
            batcher.close()

    def requests(
        self,
        model_path: str,
        queries: Sequence[str],
        *,
        k: int,
        mode: SearchMode,
        acl_groups: Sequence[str] | None = None,
        filters: dict[str, Any] | None = None,
    ) -> list[SearchRequest]:
        if not 1 <= k <= MAX_K:
            raise InvalidInputError(f"k must be between 1 and {MAX_K}.")
        groups = None if acl_groups is None else search_groups(acl_groups)
        dense = None
        if mode != "sparse":
            dense = self.query_batcher(model_path).encode(queries)
        return [
            SearchRequest(
                limit=k * _PASSAGES_PER_DOCUMENT,
                mode=mode,
                dense=dense[i] if dense is not None else None,
                sparse=self.query_bm25.embed_query(query) if mode != "dense" else None,
                acl_groups=groups,
                filters=dict(filters or {}),
                rrf_k=self.settings.rrf_k,
            )
            for i, query in enumerate(queries)
        ]

    def search(
        self,
        corpus_name: str,
        query: str,
        *,
        k: int = 10,
        mode: str | None = None,
        acl_groups: Sequence[str] | None = None,
        filters: dict[str, Any] | None = None,
        index_version: IndexVersion | None = None,
        plan: SearchPlan | None = None,
    ) -> list[SearchResult]:
        if not query.strip():
            raise InvalidInputError("The query is empty; type a few words to search for.")
        return self.search_many(
            corpus_name,
            [query],
            k=k,
            mode=mode,
            acl_groups=acl_groups,
            filters=filters,
            index_version=index_version,
            plan=plan,
        )[0]

    def _query(self, target: str, requests: list[SearchRequest], fusion: Fusion | None = None) -> list[list[SearchHit]]:
        # A long batch (an evaluation) needs no turn: it runs as one Qdrant batch, which is faster than slices of it
        # (300 SciFact queries: 3.0-3.4 s against 4.1-4.2 s in turns of 16), and interactive searches never wait
        # behind all of it.
        if self._first_stage_lock is None or len(requests) > _TURN_MAX_QUERIES:
            return self._first_stage(target, requests, fusion)
        with self._first_stage_lock:
            return self._first_stage(target, requests, fusion)

    def _first_stage(self, target: str, requests: list[SearchRequest], fusion: Fusion | None) -> list[list[SearchHit]]:
        # Hybrid is fused here, RRF included: Qdrant's prefetch ranks BM25 candidates by scores whose last bits vary
        # from one build to the next, and only here are near-equal candidates settled first (issue 11, item 14).
        if fusion is not None or any(request.mode == "hybrid" for request in requests):
            return self._query_fused(target, requests, fusion or DEFAULT_FUSION)
        # One query (the interactive case) skips the batch planner's overhead.
        if len(requests) == 1:
            return [self.backend.search(target, requests[0])]
        return self.backend.search_batch(target, requests)

    def _query_fused(self, target: str, requests: list[SearchRequest], fusion: Fusion) -> list[list[SearchHit]]:
        return fused_search(self.backend, target, requests, fusion)

    def search_many(
        self,
        corpus_name: str,
        queries: Sequence[str],
        *,
        k: int = 10,
        mode: str | None = None,
        acl_groups: Sequence[str] | None = None,
        filters: dict[str, Any] | None = None,
        index_version: IndexVersion | None = None,
        plan: SearchPlan | None = None,
    ) -> list[list[SearchResult]]:
        """Search with ``plan`` (an explicit configuration, or the base one) when given; otherwise with the active
        configuration of the corpus, or the default fusion over the active index version (or ``index_version``) when
        the corpus has none. If the active version's shard cannot be loaded, it is replaced by the newest ready
        version that loads and the search runs there (``VersionedCollection``)."""
        self.mode(mode)  # a bad mode is the caller's first mistake, before any lookup
        arguments: dict[str, Any] = {"k": k, "mode": mode, "acl_groups": acl_groups, "filters": filters, "plan": plan}
        try:
            return self._search_many(corpus_name, queries, index_version=index_version, **arguments)
        except UnreadableCollectionError as error:
            explicit = index_version is not None or plan is not None
            self._replace_unreadable(corpus_name, error, explicit=explicit)
            return self._search_many(corpus_name, queries, index_version=None, **arguments)

    def _replace_unreadable(self, corpus_name: str, error: UnreadableCollectionError, *, explicit: bool) -> None:
        """Fail the version that cannot load and let the corpus fall back; an explicitly named version, or a
        corpus with nothing left to serve, gets the one sentence naming the repair command."""
        with self.sessions() as session:
            broken = find_index_version_by_collection(session, error.collection)
            if broken is None:
                raise error
            versions = VersionedCollection(session, self.settings, self.backend, get_corpus(session, corpus_name))
            now_active = versions.replace_unreadable(broken, error.reason)  # commits
            if explicit or now_active is None:
                raise versions.unavailable(broken, error.reason) from None

    def _search_many(
        self,
        corpus_name: str,
        queries: Sequence[str],
        *,
        k: int,
        mode: str | None,
        acl_groups: Sequence[str] | None,
        filters: dict[str, Any] | None,
        index_version: IndexVersion | None,
        plan: SearchPlan | None,
    ) -> list[list[SearchResult]]:
        search_mode = self.mode(mode)
        if plan is None and index_version is None:
            plan = self.active_plans.get(corpus_name, self.sessions)
        if plan is not None:
            target, model_path = plan.collection, plan.model_path
        else:
            target, model_path = self._resolve(corpus_name, index_version)
        fusion = plan.fusion if plan is not None else None
        wanted = k
        if plan is not None and plan.reranker is not None:
            k = min(MAX_K, max(k, plan.rerank_depth))
        requests = self.requests(
            model_path,
            queries,
            k=k,
            mode=search_mode,
            acl_groups=acl_groups,
            filters=filters,
        )
        hits = self._query(target, requests, fusion)
        results = [dedupe_by_document(h, k) for h in hits]
        # A document with many matching passages can fill the fetched passages and crowd others out: ask again,
        # deeper, for the queries that came back short although Qdrant had more to give.
        for _ in range(_MAX_DEEPENING):
            short = [i for i, r in enumerate(results) if len(r) < k and len(hits[i]) == requests[i].limit]
            if not short:
                break
            for i in short:
                requests[i] = replace(requests[i], limit=min(requests[i].limit * 4, MAX_PASSAGES))
            deeper = self._query(target, [requests[i] for i in short], fusion)
            for i, h in zip(short, deeper, strict=True):
                hits[i], results[i] = h, dedupe_by_document(h, k)
        if plan is not None and plan.reranker is not None and plan.rerank_depth > 1:
            reranker = plan.reranker
            results = [
                rerank(query, found, reranker, depth=plan.rerank_depth, weight=plan.rerank_weight)
                for query, found in zip(queries, results, strict=True)
            ]
        return [found[:wanted] for found in results]
