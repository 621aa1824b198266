"""What the filesystem connector's tests read back from a folder: items by id, a document, a skip reason."""

from __future__ import annotations

from pathlib import Path

from ferret.connectors.filesystem import FilesystemConnector
from ferret.core.sources.documents import Document, SkippedItem


def load(root: Path, **config: object) -> dict[str, Document | SkippedItem]:
    return {item.external_id: item for item in FilesystemConnector(root=root, **config).load_from_source()}


def document(items: dict[str, Document | SkippedItem], external_id: str) -> Document:
    item = items[external_id]
    assert isinstance(item, Document), item
    return item


def skip_reason(items: dict[str, Document | SkippedItem], external_id: str) -> str:
    item = items[external_id]
    assert isinstance(item, SkippedItem), item
    return item.reason
