"""The server backend: qdrant-client against a Qdrant server by URL.

Each index version is its own collection; the alias search reads is moved with one
``update_collection_aliases`` call (delete + create in one request), which Qdrant applies atomically. Listing the
aliases is a request of its own, so the backend keeps the alias map and refreshes it when it changes: at once
after this process moves or deletes an alias, on a miss (an alias it does not know yet), and at most
``alias_refresh_s`` seconds after another process (a worker's promotion) moved one. CI has no
Qdrant server, so the contract tests run this class over ``QdrantClient(":memory:")``, the same client API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient, models

from ferret.core.index.backend import PAYLOAD_INTEGER_FIELDS, PAYLOAD_KEYWORD_FIELDS, IndexBackend
from ferret.core.index.types import (
    DENSE,
    SPARSE,
    IndexPoint,
    SearchHit,
    SearchRequest,
    SparseVector,
    ids_needing_payload,
    with_payloads,
)

_UPSERT_BATCH = 256


def _sparse(vector: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=vector.indices, values=vector.values)


def _condition(key: str, value: Any) -> models.FieldCondition:
    if isinstance(value, list):
        return models.FieldCondition(key=key, match=models.MatchAny(any=value))
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def build_filter(request: SearchRequest) -> models.Filter | None:
    must: list[Any] = [_condition(key, value) for key, value in request.conditions()]
    return models.Filter(must=must) if must else None


@dataclass(frozen=True)
class Distribution:
    """How a new collection is spread over a Qdrant cluster (``FERRET_QDRANT_SHARD_NUMBER``, ...); ``None`` leaves
    the server's default. Aliases are cluster-wide in Qdrant (consensus), so a promotion's one
    ``update_collection_aliases`` call stays atomic on a cluster as on one node."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None


class QdrantServerBackend(IndexBackend):
    """Example:
    >>> backend = QdrantServerBackend(QdrantClient(url="http://qdrant:6333", api_key=key))
    """

    kind = "server"

    def __init__(
        self,
        client: QdrantClient,
        *,
        alias_refresh_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        distribution: Distribution | None = None,
    ) -> None:
        self.client = client
        self.distribution = distribution or Distribution()
        self.alias_refresh_s = alias_refresh_s
        self._clock = clock
        self._aliases: dict[str, str] | None = None
        self._aliases_read_at = 0.0
        self._aliases_lock = threading.Lock()

    def _alias_map(self, *, refresh: bool = False) -> dict[str, str]:
        """Alias → collection, read again when asked, when never read, or older than ``alias_refresh_s``."""
        with self._aliases_lock:
            now = self._clock()
            if refresh or self._aliases is None or now - self._aliases_read_at >= self.alias_refresh_s:
                self._aliases = {str(a.alias_name): str(a.collection_name) for a in self.client.get_aliases().aliases}
                self._aliases_read_at = now
            return self._aliases

    def _aliases_changed(self) -> None:
        with self._aliases_lock:
            self._aliases = None

    def create_collection(self, collection: str, dimension: int) -> None:
        if self.client.collection_exists(collection):
            raise FileExistsError(f"collection {collection!r} already exists")
        self.client.create_collection(
            collection,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            shard_number=self.distribution.shard_number,
            replication_factor=self.distribution.replication_factor,
            write_consistency_factor=self.distribution.write_consistency_factor,
        )
        for field in PAYLOAD_KEYWORD_FIELDS:
            self.client.create_payload_index(collection, field, models.PayloadSchemaType.KEYWORD)
        for field in PAYLOAD_INTEGER_FIELDS:
            self.client.create_payload_index(collection, field, models.PayloadSchemaType.INTEGER)

    def drop_collection(self, collection: str) -> None:
        self.client.delete_collection(collection)
        self._aliases_changed()  # Qdrant deletes a collection's aliases with it

    def list_collections(self) -> list[str]:
        return sorted(c.name for c in self.client.get_collections().collections)

    def collection_exists(self, collection: str) -> bool:
        return bool(self.client.collection_exists(collection))

    def upsert(self, collection: str, points: Sequence[IndexPoint]) -> None:
        for start in range(0, len(points), _UPSERT_BATCH):
            batch = [
                models.PointStruct(
                    id=p.id, vector={DENSE: p.dense.tolist(), SPARSE: _sparse(p.sparse)}, payload=p.payload
                )
                for p in points[start : start + _UPSERT_BATCH]
            ]
            self.client.upsert(collection, batch, wait=True)

    def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        if point_ids:
            self.client.delete(collection, models.PointIdsList(points=list(point_ids)), wait=True)

    def set_payload(self, collection: str, point_ids: Sequence[str], payload: dict[str, Any]) -> None:
        if point_ids:
            self.client.set_payload(collection_name=collection, payload=payload, points=list(point_ids), wait=True)

    def count(self, collection: str) -> int:
        return int(self.client.count(collection, exact=True).count)

    def finalize(self, collection: str) -> None:
        # The server indexes in the background; wait until the optimizer reports green before promotion.
        info = self.client.get_collection(collection)
        if info.status == models.CollectionStatus.RED:
            raise RuntimeError(f"collection {collection!r} is in an error state")

    def set_alias(self, alias: str, collection: str) -> None:
        if not self.client.collection_exists(collection):
            raise KeyError(f"collection {collection!r} does not exist")
        operations: list[models.AliasOperations] = []
        if alias in self._alias_map(refresh=True):
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        operations.append(
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))
        )
        try:
            self.client.update_collection_aliases(change_aliases_operations=operations)
        finally:
            self._aliases_changed()

    def resolve_alias(self, alias: str) -> str | None:
        aliases = self._alias_map()
        if alias not in aliases:  # a miss: another process may have created it since the last read
            aliases = self._alias_map(refresh=True)
        return aliases.get(alias)

    def delete_alias(self, alias: str) -> None:
        if alias in self._alias_map(refresh=True):
            try:
                self.client.update_collection_aliases(
                    change_aliases_operations=[
                        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
                    ]
                )
            finally:
                self._aliases_changed()

    def _query(self, request: SearchRequest) -> dict[str, Any]:
        params = models.SearchParams(hnsw_ef=request.hnsw_ef, exact=request.exact)
        query_filter = build_filter(request)
        dense = request.dense.tolist() if request.dense is not None else None
        sparse = _sparse(request.sparse) if request.sparse is not None else None
        if request.mode == "hybrid":
            return {
                "prefetch": [
                    models.Prefetch(
                        query=dense, using=DENSE, limit=request.candidates, params=params, filter=query_filter
                    ),
                    models.Prefetch(query=sparse, using=SPARSE, limit=request.candidates, filter=query_filter),
                ],
                "query": models.RrfQuery(rrf=models.Rrf(k=request.rrf_k)),
                "query_filter": query_filter,
                "limit": request.fetch_limit,
            }
        return {
            "query": dense if request.mode == "dense" else sparse,
            "using": DENSE if request.mode == "dense" else SPARSE,
            "query_filter": query_filter,
            "search_params": params,
            "limit": request.fetch_limit,
        }

    def search(self, name: str, request: SearchRequest) -> list[SearchHit]:
        response = self.client.query_points(name, with_payload=_reads_payload(request), **self._query(request))
        return self._payloads(name, [request.hits(response.points)], [request])[0]

    def search_batch(self, name: str, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        batch = [models.QueryRequest(with_payload=_reads_payload(r), **self._batch_query(r)) for r in requests]
        responses = self.client.query_batch_points(name, requests=batch)
        hits = [request.hits(response.points) for request, response in zip(requests, responses, strict=True)]
        return self._payloads(name, hits, requests)

    def payloads(self, name: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        records = self.client.retrieve(name, ids=list(point_ids), with_payload=True, with_vectors=False)
        return {str(r.id): dict(r.payload or {}) for r in records}

    def dense_vectors(self, name: str, point_ids: Sequence[str]) -> dict[str, list[float]]:
        if not point_ids:
            return {}
        records = self.client.retrieve(name, ids=list(point_ids), with_payload=False, with_vectors=[DENSE])
        return {
            str(r.id): list(r.vector[DENSE])  # type: ignore[arg-type]
            for r in records
            if isinstance(r.vector, dict) and DENSE in r.vector
        }

    def _payloads(
        self, name: str, hits: list[list[SearchHit]], requests: Sequence[SearchRequest]
    ) -> list[list[SearchHit]]:
        """Payloads of the kept hybrid hits, in one request. The searcher queries the collection it resolved, not
        the alias, so both requests read the same index version."""
        ids = ids_needing_payload(hits, requests)
        if not ids:
            return hits
        records = self.client.retrieve(name, ids=ids, with_payload=True, with_vectors=False)
        return with_payloads(hits, requests, {str(r.id): dict(r.payload or {}) for r in records})

    def _batch_query(self, request: SearchRequest) -> dict[str, Any]:
        query = self._query(request)
        query["filter"] = query.pop("query_filter")
        if "search_params" in query:
            query["params"] = query.pop("search_params")
        return query

    def close(self) -> None:
        self.client.close()


def _reads_payload(request: SearchRequest) -> bool:
    """Whether the query itself returns payloads: not when the caller reads them later (``with_payload=False``), nor
    for Qdrant-fused hybrid, whose kept points' payloads ``_payloads`` reads."""
    return request.with_payload and not request.payload_after
