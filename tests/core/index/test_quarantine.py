"""Documents the index cannot take are quarantined, not written to a shard and not allowed to fail a build;
a fault of the index itself is not blamed on the documents (issue 11, item 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.connectors.beir.connector import BeirConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import create_corpus
from ferret.core.db.document import quarantined_documents
from ferret.core.db.models import Corpus, Document, IndexState, ModelVersion
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings


@pytest.fixture
def corpus(session: Session, settings: FerretSettings, backend: Any, tiny_beir: Path) -> Corpus:
    corpus = create_corpus(session, "kb")
    Ingestor(session, settings, backend, corpus).run(BeirConnector(path=str(tiny_beir), name="beir"))
    return corpus


@pytest.fixture
def model(session: Session, settings: FerretSettings) -> ModelVersion:
    return ModelRegistry(session, settings).ensure_base()


def found(session: Session, settings: FerretSettings, backend: Any, query: str) -> list[str]:
    return [r.external_id for r in Searcher.over(session, settings, backend).search("kb", query, k=6, mode="sparse")]


def test_a_document_the_index_refuses_is_quarantined_and_the_build_completes(
    session: Session, settings: FerretSettings, backend: Any, corpus: Corpus, model: ModelVersion
) -> None:
    backend.refused_external_ids = {"d2"}
    versions = VersionedCollection(session, settings, backend, corpus)
    built = versions.build(model)
    assert built.state == IndexState.READY and built.point_count == built.passage_count == 5
    assert [(d.external_id, d.quarantine_reason) for d in quarantined_documents(session, corpus)] == [
        ("d2", "refused by the index: payload of d2 rejected")
    ]
    versions.promote(built)
    assert "d2" not in found(session, settings, backend, "plants sunlight sugar photosynthesis")
    assert found(session, settings, backend, "capital of France")[0] == "d1"


def test_a_stored_document_beyond_the_limits_is_quarantined_by_the_build(
    session: Session, settings: FerretSettings, backend: Any, corpus: Corpus, model: ModelVersion
) -> None:
    row = session.scalar(select(Document).where(Document.external_id == "d3"))
    assert row is not None
    row.meta = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}  # 9 levels, written before limits
    session.commit()
    built = VersionedCollection(session, settings, backend, corpus).build(model)
    assert built.point_count == 5
    assert row.quarantine_reason == "metadata is nested deeper than 8 levels"


def test_when_the_index_refuses_everything_the_build_fails_and_nothing_is_quarantined(
    session: Session,
    settings: FerretSettings,
    backend: Any,
    corpus: Corpus,
    model: ModelVersion,
    fail_upserts: Callable[[BaseException | None], None],
) -> None:
    fail_upserts(ConnectionError("index went away"))
    with pytest.raises(ConnectionError):
        VersionedCollection(session, settings, backend, corpus).build(model)
    assert quarantined_documents(session, corpus) == []


def test_an_ingest_reports_a_refused_document_as_quarantined_in_every_live_version(
    session: Session, settings: FerretSettings, backend: Any, corpus: Corpus, model: ModelVersion, tiny_beir: Path
) -> None:
    versions = VersionedCollection(session, settings, backend, corpus)
    versions.promote(versions.build(model))
    second = versions.build(model)
    (tiny_beir / "corpus.jsonl").write_text(
        (tiny_beir / "corpus.jsonl").read_text() + '{"_id": "d7", "title": "Tea", "text": "Green tea is steamed."}\n'
    )
    backend.refused_external_ids = {"d7"}
    report = Ingestor(session, settings, backend, corpus).run(BeirConnector(path=str(tiny_beir), name="beir"))
    assert [(s.external_id, s.reason) for s in report.skipped] == [
        ("d7", "quarantined: refused by the index: payload of d7 rejected")
    ]
    assert backend.count("kb__v1") == backend.count(second.collection) == 6


def test_a_quarantined_document_is_tried_again_when_its_source_sends_it_again(
    session: Session, settings: FerretSettings, backend: Any, corpus: Corpus, model: ModelVersion, tiny_beir: Path
) -> None:
    versions = VersionedCollection(session, settings, backend, corpus)
    backend.refused_external_ids = {"d2"}
    versions.promote(versions.build(model))
    backend.refused_external_ids = set()
    report = Ingestor(session, settings, backend, corpus).run(BeirConnector(path=str(tiny_beir), name="beir"))
    assert (report.updated, report.unchanged, report.skipped) == (1, 5, [])
    assert quarantined_documents(session, corpus) == []
    assert backend.count("kb__v1") == 6
