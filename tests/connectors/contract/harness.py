"""A real Ferret installation for the contract suite: SQLite, embedded Qdrant Edge, the base MiniLM encoder, one
corpus with a source row, and the checks the contract makes (documents, passages, points, searches as a group)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.core.db.corpus import get_or_create_corpus
from ferret.core.db.index_version import live_index_versions
from ferret.core.db.models import Corpus, Document, Passage, Source, SyncRun
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings
from ferret.core.sources.documents import Document as SourceDocument
from ferret.core.sources.incremental import IncrementalConnector, SyncItem
from ferret.core.sources.sync import SourceSync


class Interrupted(Exception):
    """Stands for a kill: raised by ``Interrupting`` after a number of documents."""


class Interrupting(IncrementalConnector):
    """Wraps a connector and dies after ``after`` documents, as a killed worker would."""

    kind = "interrupting"

    def __init__(self, inner: IncrementalConnector, after: int) -> None:
        super().__init__(name=inner.source_name)
        self.inner, self.after = inner, after

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        documents = 0
        for item in self.inner.sync(cursor):
            if isinstance(item, SourceDocument):
                documents += 1
                if documents > self.after:
                    raise Interrupted(f"killed after {self.after} documents")
            yield item

    def close(self) -> None:
        self.inner.close()


@dataclass
class Harness:
    settings: FerretSettings
    session: Session
    backend: IndexBackend
    corpus: Corpus
    source_name: str

    @classmethod
    def create(cls, settings: FerretSettings, session: Session, backend: IndexBackend, name: str) -> Harness:
        corpus = get_or_create_corpus(session, "contract")
        session.commit()
        return cls(settings, session, backend, corpus, name)

    def source(self, kind: str) -> Source:
        source = self.session.scalar(
            select(Source).where(Source.corpus_id == self.corpus.id, Source.name == self.source_name)
        )
        if source is None:
            source = Source(corpus_id=self.corpus.id, name=self.source_name, kind=kind, config={})
            self.session.add(source)
            self.session.commit()
        return source

    def sync(self, connector: IncrementalConnector, *, checkpoint_every: int = 100) -> SyncRun:
        source = self.source(connector.kind)
        return SourceSync(
            self.session, self.settings, self.backend, self.corpus, source, checkpoint_every=checkpoint_every
        ).run_sync(connector)

    def index(self) -> None:
        """Build and promote an index version (once): later syncs must keep it up to date."""
        if not live_index_versions(self.session, self.corpus):
            versions = VersionedCollection(self.session, self.settings, self.backend, self.corpus)
            versions.promote(versions.build(ModelRegistry(self.session, self.settings).ensure_base()))

    def documents(self) -> dict[str, Document]:
        self.session.expire_all()
        rows = self.session.scalars(select(Document).where(Document.corpus_id == self.corpus.id))
        return {row.external_id: row for row in rows}

    def passage_ids(self, external_id: str | None = None) -> set[int]:
        query = select(Passage.id).join(Document).where(Passage.corpus_id == self.corpus.id)
        if external_id is not None:
            query = query.where(Document.external_id == external_id)
        return set(self.session.scalars(query))

    def assert_index_matches(self) -> None:
        """Every live version holds exactly one point per passage: nothing duplicated, nothing lost."""
        passages = self.session.scalar(select(func.count(Passage.id)).where(Passage.corpus_id == self.corpus.id))
        for version in live_index_versions(self.session, self.corpus):
            assert self.backend.count(version.collection) == passages, version.collection

    def search(self, query: str, principals: list[str]) -> set[str]:
        results = Searcher.over(self.session, self.settings, self.backend).search(
            "contract", query, k=10, mode="sparse", acl_groups=principals
        )
        return {result.external_id for result in results}
