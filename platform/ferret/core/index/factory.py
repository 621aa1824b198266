"""Choose the index backend from settings: a Qdrant server when FERRET_QDRANT_URL is set, else embedded."""

from __future__ import annotations

from ferret.core.index.backend import IndexBackend
from ferret.core.settings import FerretSettings


def open_backend(settings: FerretSettings) -> IndexBackend:
    # Each backend is imported only when chosen: one loads qdrant-client, the other Qdrant Edge's native module.
    if settings.qdrant_url:
        from qdrant_client import QdrantClient

        from ferret.core.index.server_backend import Distribution, QdrantServerBackend

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        distribution = Distribution(
            settings.qdrant_shard_number, settings.qdrant_replication_factor, settings.qdrant_write_consistency_factor
        )
        client = QdrantClient(url=settings.qdrant_url, api_key=api_key, timeout=60)
        return QdrantServerBackend(client, distribution=distribution)
    from ferret.core.index.edge_backend import EdgeIndexBackend

    settings.qdrant_path.mkdir(parents=True, exist_ok=True)
    return EdgeIndexBackend(settings.qdrant_path)
