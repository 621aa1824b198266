"""The embedded default: Qdrant Edge shards in-process, one shard folder per index version.

Qdrant Edge has no aliases, so the alias table is a small JSON file replaced atomically (write, fsync,
``os.replace``): readers see the old or the new target, never a mix. The database row of the index version
records the same state for people; this file is what search reads.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from ferret.core.errors import UnavailableError
from ferret.core.index.backend import (
    PAYLOAD_INTEGER_FIELDS,
    PAYLOAD_KEYWORD_FIELDS,
    IndexBackend,
    UnreadableCollectionError,
)
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

_UPSERT_BATCH = 512


def _sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(indices=vector.indices, values=vector.values)


def _condition(key: str, value: Any) -> qe.FieldCondition:
    if isinstance(value, list):
        return qe.FieldCondition(key=key, match=qe.MatchAny(any=value))
    return qe.FieldCondition(key=key, match=qe.MatchValue(value=value))


def build_filter(request: SearchRequest) -> qe.Filter | None:
    must: list[Any] = [_condition(key, value) for key, value in request.conditions()]
    return qe.Filter(must=must) if must else None


@dataclass
class _Holders:
    """The shards of one index folder that this process has loaded, shared by every handle opened on that folder.

    Qdrant Edge lets one holder load a shard (the write-ahead log's lock), so two handles of the same process must not
    load it twice: `ferret serve`'s searches and a push job running in one of its threads share these shards. The
    last handle to close releases them, so another process can load them."""

    shards: dict[str, qe.EdgeShard] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Shards that failed to load, with the engine's reason: not re-read on every request."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    handles: int = 0


_HOLDERS: dict[Path, _Holders] = {}
_HOLDERS_LOCK = threading.Lock()


def _leave(key: Path, holders: _Holders) -> None:
    """One handle fewer on ``key``; the last one closes the shards. Run once per join, by `close` or by the garbage
    collector for a handle nobody closed (it used to free its shards with it, and must still)."""
    with _HOLDERS_LOCK:
        holders.handles -= 1
        if holders.handles > 0:
            return
        if _HOLDERS.get(key) is holders:
            del _HOLDERS[key]
    with holders.lock:
        for shard in holders.shards.values():
            shard.close()
        holders.shards.clear()


class EdgeIndexBackend(IndexBackend):
    """Example:
    >>> backend = EdgeIndexBackend(Path("~/.ferret/qdrant").expanduser())
    >>> backend.create_collection("docs__v1", 384)
    """

    kind = "embedded"
    serial_queries = True  # Edge's native query holds the GIL: two threads query a shard no faster than one

    def __init__(self, root: Path) -> None:
        self.root = root
        self.collections_dir = root / "collections"
        self.collections_dir.mkdir(parents=True, exist_ok=True)
        self._aliases_file = root / "aliases.json"
        self._key = root.resolve()
        self._holders = _Holders()
        self._release: weakref.finalize[[Path, _Holders], EdgeIndexBackend] | None = None
        self._join()

    # -- the process's shared holders -----------------------------------------------------------------------------
    def _join(self) -> None:
        """Share this folder's loaded shards with the other handles of this process (again after a `close`)."""
        with _HOLDERS_LOCK:
            if self._release is not None and self._release.alive:
                return
            self._holders = _HOLDERS.setdefault(self._key, _Holders())
            self._holders.handles += 1
            self._release = weakref.finalize(self, _leave, self._key, self._holders)

    @property
    def _shards(self) -> dict[str, qe.EdgeShard]:
        return self._holders.shards

    @property
    def _unreadable(self) -> dict[str, str]:
        return self._holders.unreadable

    @property
    def _lock(self) -> threading.RLock:
        return self._holders.lock

    # -- shards -------------------------------------------------------------------------------------------------
    def _path(self, collection: str) -> Path:
        if not collection or "/" in collection or collection.startswith("."):
            raise ValueError(f"invalid collection name {collection!r}")
        return self.collections_dir / collection

    def _shard(self, collection: str) -> qe.EdgeShard:
        self._join()
        with self._lock:
            shard = self._shards.get(collection)
            if shard is None:
                path = self._path(collection)
                if not path.is_dir():
                    raise KeyError(f"collection {collection!r} does not exist")
                if collection in self._unreadable:
                    raise UnreadableCollectionError(collection, self._unreadable[collection])
                shard = self._load(collection, path)
                self._shards[collection] = shard
            return shard

    def _load(self, collection: str, path: Path) -> qe.EdgeShard:
        try:
            return qe.EdgeShard.load(str(path))
        except Exception as error:  # qdrant-edge raises plain Exception with the engine's message
            message = str(error)
            if "WouldBlock" in message:
                # Another process holds the shard's write-ahead log: Qdrant Edge allows one process per shard.
                raise UnavailableError(
                    f"The embedded index {collection!r} is open in another Ferret process (`ferret serve`, a worker, "
                    "`ferret tui`, `ferret admin`, or a running ingest, build or pipeline); the embedded store serves "
                    "one process at a time: use that server's HTTP API or wait for the process to stop, or set "
                    "FERRET_QDRANT_URL to a Qdrant server, which all processes share."
                ) from None
            self._unreadable[collection] = message
            raise UnreadableCollectionError(collection, message) from error

    def create_collection(self, collection: str, dimension: int) -> None:
        config = qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        self._join()
        with self._lock:
            path = self._path(collection)
            if path.exists():
                raise FileExistsError(f"collection {collection!r} already exists")
            shard = qe.EdgeShard.create(str(path), config)
            for field in PAYLOAD_KEYWORD_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
            for field in PAYLOAD_INTEGER_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Integer))
            self._shards[collection] = shard

    def drop_collection(self, collection: str) -> None:
        """Delete a collection's files; refused (``UnavailableError``) while another process has it open, which
        would otherwise go on serving the deleted files from memory."""
        with self._lock:
            shard = self._shards.pop(collection, None)
            path = self._path(collection)
            if shard is None and path.exists() and collection not in self._unreadable:
                try:
                    shard = self._load(collection, path)  # takes the shard's lock, or says who holds it
                except UnreadableCollectionError:
                    shard = None  # a broken collection is dropped as it is
            if shard is not None:
                shard.close()
            self._unreadable.pop(collection, None)
            shutil.rmtree(self._path(collection), ignore_errors=True)
            # As in Qdrant, a collection's aliases go with it: never leave an alias pointing at nothing.
            aliases = self._read_aliases()
            kept = {alias: target for alias, target in aliases.items() if target != collection}
            if kept != aliases:
                self._write_aliases(kept)

    def list_collections(self) -> list[str]:
        return sorted(p.name for p in self.collections_dir.iterdir() if p.is_dir())

    def upsert(self, collection: str, points: Sequence[IndexPoint]) -> None:
        shard = self._shard(collection)
        for start in range(0, len(points), _UPSERT_BATCH):
            batch = [
                qe.Point(p.id, {DENSE: p.dense.tolist(), SPARSE: _sparse(p.sparse)}, p.payload)
                for p in points[start : start + _UPSERT_BATCH]
            ]
            shard.update(qe.UpdateOperation.upsert_points(batch))

    def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._shard(collection).update(qe.UpdateOperation.delete_points(list(point_ids)))

    def set_payload(self, collection: str, point_ids: Sequence[str], payload: dict[str, Any]) -> None:
        if point_ids:
            self._shard(collection).update(qe.UpdateOperation.set_payload(list(point_ids), payload))

    def count(self, collection: str) -> int:
        return int(self._shard(collection).count(qe.CountRequest(exact=True)))

    def finalize(self, collection: str) -> None:
        shard = self._shard(collection)
        shard.optimize()  # builds the HNSW graph and payload indexes of the final segments
        shard.flush()

    # -- aliases ------------------------------------------------------------------------------------------------
    def _read_aliases(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._aliases_file.read_text()))
        except FileNotFoundError:
            return {}

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        tmp = self._aliases_file.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w") as handle:
            json.dump(aliases, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self._aliases_file)

    def set_alias(self, alias: str, collection: str) -> None:
        self._join()
        with self._lock:
            if not self._path(collection).is_dir():
                raise KeyError(f"collection {collection!r} does not exist")
            self._write_aliases({**self._read_aliases(), alias: collection})

    def resolve_alias(self, alias: str) -> str | None:
        return self._read_aliases().get(alias)

    def delete_alias(self, alias: str) -> None:
        self._join()
        with self._lock:
            aliases = self._read_aliases()
            if aliases.pop(alias, None) is not None:
                self._write_aliases(aliases)

    # -- search -------------------------------------------------------------------------------------------------
    def _request(self, request: SearchRequest) -> qe.QueryRequest:
        params = qe.SearchParams(hnsw_ef=request.hnsw_ef, exact=request.exact)
        query_filter = build_filter(request)
        dense = qe.Query.Nearest(request.dense.tolist(), using=DENSE) if request.dense is not None else None
        sparse = qe.Query.Nearest(_sparse(request.sparse), using=SPARSE) if request.sparse is not None else None
        if request.mode == "hybrid":
            prefetches = [
                qe.Prefetch(limit=request.candidates, query=dense, params=params, filter=query_filter),
                qe.Prefetch(limit=request.candidates, query=sparse, filter=query_filter),
            ]
            return qe.QueryRequest(
                limit=request.fetch_limit,
                prefetches=prefetches,
                query=qe.Fusion.Rrf(k=request.rrf_k),  # type: ignore[arg-type]  # the stub omits Fusion's variants
                filter=query_filter,
                with_payload=False,  # read afterwards for the kept points only (SearchRequest.payload_after)
            )
        return qe.QueryRequest(
            limit=request.fetch_limit,
            query=dense if request.mode == "dense" else sparse,
            filter=query_filter,
            params=params,
            with_payload=request.with_payload,
        )

    def _target(self, name: str) -> str:
        """The collection ``name`` stands for: itself when it is an open collection (the searcher resolved the
        alias already: no second read of the alias file), else what the alias points at."""
        if name in self._shards:
            return name
        return self.resolve_alias(name) or name

    def search(self, name: str, request: SearchRequest) -> list[SearchHit]:
        shard = self._shard(self._target(name))
        return self._payloads(shard, [request.hits(shard.query(self._request(request)))], [request])[0]

    def search_batch(self, name: str, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        shard = self._shard(self._target(name))
        results = shard.query_batch(qe.QueryBatchRequest([self._request(r) for r in requests]))
        hits = [request.hits(points) for request, points in zip(requests, results, strict=True)]
        return self._payloads(shard, hits, requests)

    def payloads(self, name: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        shard = self._shard(self._target(name))
        records = shard.retrieve(list(point_ids), with_payload=True, with_vector=False)
        return {str(r.id): r.payload or {} for r in records}

    def dense_vectors(self, name: str, point_ids: Sequence[str]) -> dict[str, list[float]]:
        if not point_ids:
            return {}
        records = self._shard(self._target(name)).retrieve(list(point_ids), with_payload=False, with_vector=True)
        return {
            str(r.id): list(r.vector[DENSE])  # type: ignore[arg-type]  # the dense one is a plain list
            for r in records
            if isinstance(r.vector, dict) and DENSE in r.vector
        }

    @staticmethod
    def _payloads(
        shard: qe.EdgeShard, hits: list[list[SearchHit]], requests: Sequence[SearchRequest]
    ) -> list[list[SearchHit]]:
        ids = ids_needing_payload(hits, requests)
        if not ids:
            return hits
        records = shard.retrieve(ids, with_payload=True, with_vector=False)  # type: ignore[arg-type]
        return with_payloads(hits, requests, {str(r.id): r.payload or {} for r in records})

    def close(self) -> None:
        """Let go of this handle; the last handle of the process on this folder closes the shards (idempotent)."""
        if self._release is not None:
            self._release()
