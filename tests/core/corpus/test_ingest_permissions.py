"""``ferret ingest`` (the full-load Ingestor) compares permissions on their own too: a changed ``acl`` map of the
filesystem connector rewrites the rows and the payload of every live version without re-embedding."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import Document, Passage
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings


def test_an_acl_only_change_updates_rows_and_payloads_without_re_embedding(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    (folder / "hr").mkdir(parents=True)
    (folder / "hr" / "leave.md").write_text("# Leave\n\nParental leave lasts sixteen weeks.\n", encoding="utf-8")
    (folder / "menu.md").write_text("# Menu\n\nSoup on Mondays.\n", encoding="utf-8")
    corpus = create_corpus(session, "docs")
    Ingestor(session, settings, backend, corpus).run(FilesystemConnector(root=str(folder), acl={"hr/*": ["hr"]}))
    versions = VersionedCollection(session, settings, backend, corpus)
    versions.promote(versions.build(ModelRegistry(session, settings).ensure_base()))
    passages = set(session.scalars(select(Passage.id)))

    report = Ingestor(session, settings, backend, corpus).run(
        FilesystemConnector(root=str(folder), acl={"hr/*": ["hr-managers"]})
    )

    assert (report.permissions_updated, report.updated, report.passages_added) == (1, 0, 0)
    assert set(session.scalars(select(Passage.id))) == passages
    row = session.scalars(select(Document).where(Document.external_id == "hr/leave.md")).one()
    assert row.acl_groups == ["hr-managers"]
    searcher = Searcher.over(session, settings, backend)
    assert not searcher.search("docs", "parental leave weeks", mode="sparse", acl_groups=["hr"])
    assert searcher.search("docs", "parental leave weeks", mode="sparse", acl_groups=["hr-managers"])[
        0
    ].external_id == ("hr/leave.md")
