"""Queries on documents and passages."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from sqlalchemy import case, delete, func, literal, select
from sqlalchemy.orm import Session

from ferret.core.acl import may_read
from ferret.core.corpus.chunking import passage_text
from ferret.core.db.models import Corpus, Document, Passage
from ferret.core.errors import NotFoundError

# A quarantined document matches no hash and no version, so the next delivery of it is tried again.
_HASH = case((Document.quarantine_reason.is_(None), Document.content_hash), else_=literal(""))
_VERSION = case((Document.quarantine_reason.is_(None), Document.version), else_=literal(None))


def document_hashes(session: Session, corpus: Corpus, source: str) -> dict[str, tuple[int, str]]:
    """external id -> (document id, content hash) for one source, without loading bodies."""
    rows = session.execute(
        select(Document.external_id, Document.id, _HASH).where(
            Document.corpus_id == corpus.id, Document.source == source
        )
    )
    return {external_id: (document_id, content_hash) for external_id, document_id, content_hash in rows}


def document_states(
    session: Session, corpus: Corpus, source: str, external_ids: Sequence[str]
) -> dict[str, tuple[int, str, str | None]]:
    """external id -> (document id, content hash, version) for the given ids of one source (a push batch), without
    loading bodies or the rest of the source."""
    states: dict[str, tuple[int, str, str | None]] = {}
    wanted = sorted(set(external_ids))
    for start in range(0, len(wanted), 500):
        rows = session.execute(
            select(Document.external_id, Document.id, _HASH, _VERSION).where(
                Document.corpus_id == corpus.id,
                Document.source == source,
                Document.external_id.in_(wanted[start : start + 500]),
            )
        )
        for external_id, document_id, content_hash, version in rows:
            states[external_id] = (document_id, content_hash, version)
    return states


def passage_ids_of_documents(session: Session, document_ids: Sequence[int]) -> list[int]:
    ids: list[int] = []
    for start in range(0, len(document_ids), 500):
        chunk = document_ids[start : start + 500]
        ids.extend(session.scalars(select(Passage.id).where(Passage.document_id.in_(chunk))))
    return ids


def passage_texts_of_documents(session: Session, document_ids: Sequence[int]) -> dict[int, list[str]]:
    """Document id → its passages as they are embedded and indexed (title, then window), in document order."""
    texts: dict[int, list[str]] = {}
    for start in range(0, len(document_ids), 500):
        chunk = list(document_ids[start : start + 500])
        rows = session.execute(
            select(Passage.document_id, Document.title, Passage.text)
            .join(Document, Document.id == Passage.document_id)
            .where(Passage.document_id.in_(chunk))
            .order_by(Passage.document_id, Passage.ordinal)
        )
        for document_id, title, text in rows:
            texts.setdefault(document_id, []).append(passage_text(title, text))
    return texts


def delete_documents(session: Session, document_ids: Sequence[int]) -> None:
    for start in range(0, len(document_ids), 500):
        chunk = list(document_ids[start : start + 500])
        session.execute(delete(Passage).where(Passage.document_id.in_(chunk)))
        session.execute(delete(Document).where(Document.id.in_(chunk)))


def iter_passages(
    session: Session, corpus: Corpus, *, passage_ids: Sequence[int] | None = None, batch_size: int = 1000
) -> Iterator[list[tuple[Passage, Document]]]:
    """Passages with their documents in batches: the given ids in the given order (batch by batch), or the whole
    corpus in id order (keyset pagination: memory stays flat)."""
    if passage_ids is not None:
        for start in range(0, len(passage_ids), batch_size):
            chunk = list(passage_ids[start : start + batch_size])
            selected = session.execute(
                select(Passage, Document)
                .join(Document)
                .where(Passage.id.in_(chunk), Document.quarantine_reason.is_(None))
                .order_by(Passage.id)
            )
            yield [(passage, document) for passage, document in selected]
        return
    last_id = 0
    while True:
        rows = session.execute(
            select(Passage, Document)
            .join(Document)
            .where(Passage.corpus_id == corpus.id, Passage.id > last_id, Document.quarantine_reason.is_(None))
            .order_by(Passage.id)
            .limit(batch_size)
        ).all()
        if not rows:
            return
        yield [(passage, document) for passage, document in rows]
        last_id = rows[-1][0].id


def passage_ids_by_length(session: Session, corpus: Corpus) -> list[int]:
    """The indexable passage ids of a corpus, shortest first: batches of similar length pad little when embedded."""
    return list(
        session.scalars(
            select(Passage.id)
            .join(Document)
            .where(Passage.corpus_id == corpus.id, Document.quarantine_reason.is_(None))
            .order_by(Passage.token_count, Passage.id)
        )
    )


def readable_document(session: Session, corpus: Corpus, document_id: int, groups: Collection[str]) -> Document:
    """A document of ``corpus`` that a caller with ``groups`` may read, with its passages in order.

    A document shared with none of the groups, quarantined (it reaches no index, so no search returns it) or of
    another corpus raises the same ``NotFoundError`` as a missing one: the answer must not tell a caller that a
    document it cannot read exists (issue 11's rule for counts, applied to one document)."""
    document = session.get(Document, document_id)
    if (
        document is None
        or document.corpus_id != corpus.id
        or document.quarantine_reason is not None
        or not may_read(groups, document.acl_groups)
    ):
        raise NotFoundError(f"Corpus {corpus.name!r} has no document {document_id} that this caller may read.")
    return document


def list_documents(session: Session, corpus: Corpus, *, limit: int = 200) -> list[Document]:
    """The first ``limit`` documents of a corpus in id order (for pickers: a sample document, an example)."""
    return list(
        session.scalars(select(Document).where(Document.corpus_id == corpus.id).order_by(Document.id).limit(limit))
    )


def documents_by_external_id(session: Session, corpus: Corpus) -> dict[str, tuple[str, str]]:
    """external id -> (title, body) of every document of a corpus: what a labelled set's qrels name."""
    rows = session.execute(
        select(Document.external_id, Document.title, Document.body).where(Document.corpus_id == corpus.id)
    )
    return {external_id: (title, body) for external_id, title, body in rows}


def indexable_passage_count(session: Session, corpus: Corpus) -> int:
    """Passages of the documents that are not quarantined: what a complete index version holds."""
    return (
        session.scalar(
            select(func.count(Passage.id))
            .join(Document)
            .where(Passage.corpus_id == corpus.id, Document.quarantine_reason.is_(None))
        )
        or 0
    )


def quarantined_documents(session: Session, corpus: Corpus) -> list[Document]:
    return list(
        session.scalars(
            select(Document)
            .where(Document.corpus_id == corpus.id, Document.quarantine_reason.is_not(None))
            .order_by(Document.source, Document.external_id)
        )
    )


def indexable_documents(session: Session, corpus: Corpus, *, batch_size: int = 500) -> Iterator[list[Document]]:
    """Documents not quarantined, in id order and batches (keyset pagination): what a repair re-checks."""
    last_id = 0
    while True:
        batch = list(
            session.scalars(
                select(Document)
                .where(Document.corpus_id == corpus.id, Document.id > last_id, Document.quarantine_reason.is_(None))
                .order_by(Document.id)
                .limit(batch_size)
            )
        )
        if not batch:
            return
        yield batch
        last_id = batch[-1].id
