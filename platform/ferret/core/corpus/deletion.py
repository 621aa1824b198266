"""Deleting a whole corpus: its database rows and every Qdrant collection and alias it owns (issue 11, item 13).

The rows go first, inside the caller's transaction (documents, passages, sources, index versions, search
configurations and tasks follow the corpus through the schema's ``ON DELETE CASCADE``; jobs keep their history with
no corpus). If the database refuses, nothing else has changed. The collections are dropped next, and the
transaction commits last with the audit event. A collection that cannot be dropped rolls the rows back, so the
command can simply be run again: it drops what is left. Trained model versions are kept: a model is not the corpus's.

Example:
    >>> deleted = delete_corpus(session, backend, get_corpus(session, "handbook"), actor=cli_actor())
    >>> deleted.documents, deleted.collections
    (1204, ['handbook__v1', 'handbook__v2'])
"""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ferret.core.db.audit import record_event
from ferret.core.db.corpus import corpus_counts
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.models import Corpus, Job, JobState
from ferret.core.errors import ConflictError
from ferret.core.index.backend import IndexBackend, UnreadableCollectionError


@dataclass(frozen=True)
class CorpusDeletion:
    name: str
    documents: int
    passages: int
    collections: list[str]


def delete_corpus(session: Session, backend: IndexBackend, corpus: Corpus, *, actor: str) -> CorpusDeletion:
    """Delete ``corpus`` everywhere; refused while one of its jobs is queued or running."""
    busy = session.scalars(
        select(Job).where(Job.corpus_id == corpus.id, Job.state.in_([JobState.QUEUED, JobState.RUNNING]))
    ).first()
    if busy is not None:
        raise ConflictError(
            f"Job {busy.id} ({busy.kind}) is {busy.state.value} on corpus {corpus.name!r}; wait for it or cancel it "
            f"(`ferret jobs cancel {busy.id}`) before deleting the corpus."
        )
    name = corpus.name
    documents, passages = corpus_counts(session, corpus)
    # REALM's internal refresh collections (``<corpus>__realm<run>_r<n>``) are the corpus's too.
    internal = re.compile(rf"{re.escape(name)}__realm\d+_r\d+")
    collections = [v.collection for v in list_index_versions(session, corpus)]
    collections += [c for c in backend.list_collections() if internal.fullmatch(c) and c not in collections]
    for collection in collections:  # each one opened first: one held by a running server stops it all here
        if backend.collection_exists(collection):
            with suppress(UnreadableCollectionError):  # a broken one is dropped as it is
                backend.count(collection)
    session.execute(delete(Corpus).where(Corpus.id == corpus.id))
    session.flush()
    try:
        for alias in {name, *(c.rsplit("_r", 1)[0] for c in collections if internal.fullmatch(c))}:
            backend.delete_alias(alias)
        for collection in collections:
            if backend.collection_exists(collection):
                backend.drop_collection(collection)
    except Exception:
        session.rollback()
        raise
    record_event(
        session,
        actor,
        "corpus.delete",
        name,
        {"documents": documents, "passages": passages, "collections": collections},
    )
    session.commit()
    return CorpusDeletion(name, documents, passages, collections)
