"""The index interface both Qdrant backends implement, and the one contract test suite checks.

A *collection* is one immutable-by-convention index version (``<corpus>__v<N>``); an *alias* is the stable name
search reads (``<corpus>``). Switching an alias is atomic in both backends, so a refresh is one swap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from ferret.core.index.types import IndexPoint, SearchHit, SearchRequest

PAYLOAD_KEYWORD_FIELDS = ("acl_groups", "source", "external_id")
PAYLOAD_INTEGER_FIELDS = ("document_id", "passage_id")


class UnreadableCollectionError(Exception):
    """A collection exists but its engine cannot open it (a corrupt write-ahead log, a payload it cannot read back).

    Not a user error by itself: ``VersionedCollection`` turns it into a failed version and a fallback."""

    def __init__(self, collection: str, reason: str) -> None:
        super().__init__(f"collection {collection!r} cannot be loaded: {reason}")
        self.collection = collection
        self.reason = reason


class IndexBackend(ABC):
    """Storage and search of dense + BM25 sparse vectors with payloads, in versioned collections."""

    kind: ClassVar[str]
    serial_queries: ClassVar[bool] = False
    """True when this backend's queries run inside this process holding the GIL (Qdrant Edge): concurrent searches
    cannot overlap there, so the searcher runs their first stage one at a time rather than let them contend for it.
    A server backend waits on the network with the GIL released, and its searches stay concurrent."""

    @abstractmethod
    def create_collection(self, collection: str, dimension: int) -> None:
        """Create an empty collection with a cosine dense vector, an IDF sparse vector and payload indexes."""

    @abstractmethod
    def drop_collection(self, collection: str) -> None:
        """Delete a collection and its data; a missing collection is not an error."""

    @abstractmethod
    def list_collections(self) -> list[str]: ...

    def collection_exists(self, collection: str) -> bool:
        return collection in self.list_collections()

    @abstractmethod
    def upsert(self, collection: str, points: Sequence[IndexPoint]) -> None: ...

    @abstractmethod
    def delete(self, collection: str, point_ids: Sequence[str]) -> None: ...

    @abstractmethod
    def set_payload(self, collection: str, point_ids: Sequence[str], payload: dict[str, Any]) -> None:
        """Overwrite the given payload keys of existing points, leaving vectors alone (a permission-only change)."""

    @abstractmethod
    def count(self, collection: str) -> int: ...

    @abstractmethod
    def finalize(self, collection: str) -> None:
        """Make a freshly built collection durable and fully indexed (HNSW) before it can be promoted."""

    @abstractmethod
    def set_alias(self, alias: str, collection: str) -> None:
        """Point ``alias`` at ``collection`` in one atomic step."""

    @abstractmethod
    def resolve_alias(self, alias: str) -> str | None: ...

    @abstractmethod
    def delete_alias(self, alias: str) -> None: ...

    @abstractmethod
    def search(self, name: str, request: SearchRequest) -> list[SearchHit]:
        """Search a collection or an alias."""

    def search_batch(self, name: str, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        return [self.search(name, request) for request in requests]

    @abstractmethod
    def payloads(self, name: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Point id → payload of the given points of a collection; a point that no longer exists is left out."""

    @abstractmethod
    def dense_vectors(self, name: str, point_ids: Sequence[str]) -> dict[str, list[float]]:
        """Point id → stored dense vector of the given points of a collection; a missing point is left out."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections."""
