"""The contract every full-load connector (filesystem, BEIR) keeps, run against each one (after Haystack's
``testing/``). The incremental connectors (filesystem, sql, git, web, s3, smb, confluence, sharepoint) have their own
contract suite against real servers in ``tests/connectors/contract``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.connectors.registry import CONNECTORS, build_connector, get_connector_class
from ferret.core.sources.capabilities import LoadConnector, SlimConnector
from ferret.core.sources.documents import Document, SkippedItem

LOAD_CONNECTORS = ("beir", "filesystem")


@pytest.fixture(params=LOAD_CONNECTORS)
def connector(request: pytest.FixtureRequest, docs_folder: Path, beir_dataset: Path) -> LoadConnector:
    configs = {"filesystem": {"root": docs_folder}, "beir": {"path": beir_dataset}}
    built = build_connector(request.param, **configs[request.param])
    assert isinstance(built, LoadConnector)
    return built


def test_outputs_are_documents_or_skipped_items(connector: LoadConnector) -> None:
    items = list(connector.load_from_source())

    assert items
    assert all(isinstance(item, Document | SkippedItem) for item in items)
    assert all(item.source == connector.source_name for item in items if isinstance(item, Document))


def test_external_ids_are_unique(connector: LoadConnector) -> None:
    ids = [item.external_id for item in connector.load_from_source()]

    assert len(ids) == len(set(ids))


def test_list_external_ids_matches_loaded_documents(connector: LoadConnector) -> None:
    assert isinstance(connector, SlimConnector)
    loaded = {item.external_id for item in connector.load_from_source() if isinstance(item, Document)}

    assert set(connector.list_external_ids()) == loaded


def test_content_hash_is_stable_across_loads(connector: LoadConnector) -> None:
    def hashes() -> dict[str, str]:
        documents = [item for item in connector.load_from_source() if isinstance(item, Document)]
        return {document.external_id: document.content_hash for document in documents}

    assert hashes() == hashes()


def test_every_other_kind_is_an_incremental_connector() -> None:
    from ferret.core.sources.incremental import IncrementalConnector

    for kind in set(CONNECTORS) - set(LOAD_CONNECTORS):
        assert issubclass(get_connector_class(kind), IncrementalConnector), kind
