"""The server backend: qdrant-client against a Qdrant server by URL.

Each index version is its own collection; the alias search reads is moved with one
``update_collection_aliases`` call (delete + create in one request), which Qdrant applies atomically. CI has no
Qdrant server, so the contract tests run this class over ``QdrantClient(":memory:")``, the same client API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from ferret.core.index.backend import PAYLOAD_INTEGER_FIELDS, PAYLOAD_KEYWORD_FIELDS, IndexBackend
from ferret.core.index.types import DENSE, SPARSE, IndexPoint, SearchHit, SearchRequest, SparseVector

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


class QdrantServerBackend(IndexBackend):
    """Example:
    >>> backend = QdrantServerBackend(QdrantClient(url="http://qdrant:6333", api_key=key))
    """

    kind = "server"

    def __init__(self, client: QdrantClient) -> None:
        self.client = client

    def create_collection(self, collection: str, dimension: int) -> None:
        if self.client.collection_exists(collection):
            raise FileExistsError(f"collection {collection!r} already exists")
        self.client.create_collection(
            collection,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        for field in PAYLOAD_KEYWORD_FIELDS:
            self.client.create_payload_index(collection, field, models.PayloadSchemaType.KEYWORD)
        for field in PAYLOAD_INTEGER_FIELDS:
            self.client.create_payload_index(collection, field, models.PayloadSchemaType.INTEGER)

    def drop_collection(self, collection: str) -> None:
        self.client.delete_collection(collection)

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
        if self.resolve_alias(alias) is not None:
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        operations.append(
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))
        )
        self.client.update_collection_aliases(change_aliases_operations=operations)

    def resolve_alias(self, alias: str) -> str | None:
        for description in self.client.get_aliases().aliases:
            if description.alias_name == alias:
                return str(description.collection_name)
        return None

    def delete_alias(self, alias: str) -> None:
        if self.resolve_alias(alias) is not None:
            self.client.update_collection_aliases(
                change_aliases_operations=[
                    models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
                ]
            )

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
            "limit": request.limit,
        }

    def search(self, name: str, request: SearchRequest) -> list[SearchHit]:
        response = self.client.query_points(name, with_payload=True, **self._query(request))
        return request.hits(response.points)

    def search_batch(self, name: str, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        batch = [models.QueryRequest(with_payload=True, **self._batch_query(r)) for r in requests]
        responses = self.client.query_batch_points(name, requests=batch)
        return [request.hits(response.points) for request, response in zip(requests, responses, strict=True)]

    def _batch_query(self, request: SearchRequest) -> dict[str, Any]:
        query = self._query(request)
        query["filter"] = query.pop("query_filter")
        if "search_params" in query:
            query["params"] = query.pop("search_params")
        return query

    def close(self) -> None:
        self.client.close()
