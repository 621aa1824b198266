"""Configured sources as a service for the faces (CLI, HTTP API, admin, scheduler): add, list, sync, remove, due.

Adding a source builds its connector and runs its ``check_access`` (one or two round trips to the store) before
anything is written, so a wrong bucket, password, share, table, repository or site is refused with the connector's
sentence instead of surfacing at the first sync; ``check=False`` (``--no-check``) stores a source whose store is
not reachable yet.

The connector is built by a ``ConnectorBuilder`` the caller passes in (``ferret.connectors.registry.build_connector``
in production), so the domain never imports a connector; secrets are resolved only in memory, just before a build.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.corpus.push import PUSH_SOURCE_KIND
from ferret.core.db.corpus import find_corpus, get_corpus, get_or_create_corpus, validate_corpus_name
from ferret.core.db.document import delete_documents, passage_ids_of_documents
from ferret.core.db.models import Corpus, Document, Source, SyncRun
from ferret.core.db.source import (
    delete_group_members,
    find_source,
    get_source,
    last_sync_run,
    list_sources,
    sync_run_alive,
)
from ferret.core.errors import ConflictError, FerretError, InvalidInputError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import ConnectorFactory
from ferret.core.sources.config import SourceSpec, check_no_plaintext_secrets, resolve_secrets, without_secrets
from ferret.core.sources.incremental import IncrementalConnector
from ferret.core.sources.sync import SourceSync, SyncReport

ConnectorBuilder = ConnectorFactory
"""``build(kind, **config)``: a connector of that kind (the runtime's connector registry)."""


def build_for(source: Source, build: ConnectorBuilder) -> IncrementalConnector:
    """The source's connector, its secret references resolved now."""
    config = resolve_secrets(dict(source.config))
    config["name"] = source.name
    connector = build(source.kind, **config)
    if not isinstance(connector, IncrementalConnector):
        raise not_incremental(source.kind)
    return connector


def not_incremental(kind: str) -> InvalidInputError:
    """The error for a source whose connector kind has no incremental sync."""
    return InvalidInputError(
        f"Connector kind {kind!r} cannot be a scheduled source (it has no incremental sync); "
        "index it with `ferret ingest` instead."
    )


def add_source(
    session: Session, spec: SourceSpec, build: ConnectorBuilder, *, replace: bool = False, check: bool = True
) -> Source:
    """Store a source after building its connector once (a bad config fails here, not at the first sync) and, with
    ``check``, after its ``check_access`` proved the source can be reached and read as configured. Nothing is written
    before both passed: a refused source leaves the sources table (and an existing definition) as it was. Every
    sentence is scrubbed of the values of the config's secret references. A changed config drops the checkpoint, so
    the next sync reads every document (unchanged ones are not re-embedded)."""
    check_no_plaintext_secrets(spec.config)
    validate_corpus_name(spec.corpus)
    corpus = find_corpus(session, spec.corpus)
    source = find_source(session, corpus, spec.name) if corpus is not None else None
    if source is not None and not replace:
        raise ConflictError(
            f"Corpus {spec.corpus!r} already has a source {spec.name!r}; pass --replace to change its definition.",
            over_http=f"Corpus {spec.corpus!r} already has a source {spec.name!r}; send replace=true to change its "
            "definition.",
        )
    if source is not None and source.kind != spec.kind:
        raise ConflictError(f"Source {spec.name!r} is a {source.kind} source; remove it before adding a {spec.kind}.")
    config = {key: value for key, value in spec.config.items() if key != "name"}
    probe_connector(Source(name=spec.name, kind=spec.kind, config=config), build, check=check)
    if source is None:
        corpus = corpus or get_or_create_corpus(session, spec.corpus)
        source = Source(corpus_id=corpus.id, name=spec.name, kind=spec.kind, config=config)
        session.add(source)
    elif source.config != config:
        # The checkpoint is a position in what the old config read (a watermark, a commit, delta links): kept, a
        # source pointed at another bucket, share, table or site would never read the documents older than it.
        source.checkpoint = None
    source.config = config
    source.schedule_minutes = spec.schedule_minutes
    source.enabled = spec.enabled
    session.flush()
    return source


def probe_connector(source: Source, build: ConnectorBuilder, *, check: bool = True) -> None:
    """Build the source's connector once and, with ``check``, run its access check (one or two round trips). Every
    sentence is scrubbed of the config's secret values; a refused check also says that nothing was stored and how
    to store the source without the check."""
    try:
        connector = build_for(source, build)
    except FerretError as error:
        raise type(error)(
            without_secrets(str(error), source.config),
            over_http=None if error.over_http is None else without_secrets(error.over_http, source.config),
        ) from None
    try:
        if check:
            connector.check_access()
    except FerretError as error:
        sentence = without_secrets(str(error), source.config).rstrip(".")
        raise type(error)(
            f"{sentence}; nothing was stored (`--no-check` stores the source without this check).",
            over_http=f"{sentence}; nothing was stored (check=false stores the source without this check).",
        ) from None
    finally:
        connector.close()


def group_option(source: Source, build: ConnectorBuilder) -> str:
    """How ``ferret search --group`` names a group of the source's documents: ``<source>:group:<name>`` for a
    store's own groups, ``<name>`` for a connector whose config names Ferret's groups (a folder's ``acl`` map)."""
    connector = build_for(source, build)
    try:
        return f"{source.name}:group:<name>" if connector.scoped_groups else "<name>"
    finally:
        connector.close()


def sync_source(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    build: ConnectorBuilder,
    source: Source,
    *,
    trigger: str = "manual",
    checkpoint_every: int = 100,
    on_checkpoint: Callable[[SyncReport], None] | None = None,
    full: bool = False,
) -> SyncRun:
    """One sync of ``source`` (``full``: from the start, not from its checkpoint); ``on_checkpoint`` sees the report
    after each committed checkpoint (a job's progress: ``ferret.core.jobs.source_sync``)."""
    check_syncable(session, source)
    corpus = source_corpus(session, source)
    connector = build_for(source, build)
    sync = SourceSync(
        session, settings, backend, corpus, source, checkpoint_every=checkpoint_every, on_checkpoint=on_checkpoint
    )
    return sync.run_sync(connector, trigger=trigger, full=full)


def check_syncable(session: Session, source: Source) -> None:
    """Refuse a sync of the source the push API writes: it has no connector to read from."""
    if source.kind == PUSH_SOURCE_KIND:
        raise InvalidInputError(
            f"Source {source.name!r} receives its documents through the push API (POST /v1/corpora/"
            f"{source_corpus(session, source).name}/documents); there is nothing to sync from it."
        )


def find_configured(session: Session, corpus: str, name: str) -> Source:
    return get_source(session, get_corpus(session, corpus), name)


def source_corpus(session: Session, source: Source) -> Corpus:
    corpus = session.get(Corpus, source.corpus_id)
    if corpus is None:  # pragma: no cover - the foreign key cascades
        raise InvalidInputError(f"Source {source.name!r} belongs to no corpus.")
    return corpus


def remove_source(session: Session, backend: IndexBackend, settings: FerretSettings, source: Source) -> int:
    """Delete the source, its documents (database and every live index version), runs and memberships."""
    corpus = source_corpus(session, source)
    document_ids = list(
        session.scalars(select(Document.id).where(Document.corpus_id == corpus.id, Document.source == source.name))
    )
    passage_ids = passage_ids_of_documents(session, document_ids)
    delete_documents(session, document_ids)
    session.flush()
    VersionedCollection(session, settings, backend, corpus).sync([], passage_ids)
    delete_group_members(session, source)
    session.delete(source)
    session.commit()
    return len(document_ids)


def due_sources(session: Session, now: datetime | None = None) -> list[Source]:
    """Enabled, scheduled sources whose last run started at least ``schedule_minutes`` ago (or never ran), and
    that are not syncing now (``sync_run_alive``: a sync that was killed does not hold its source back)."""
    now = now or datetime.now(UTC)
    due: list[Source] = []
    for source in list_sources(session):
        if not source.enabled or not source.schedule_minutes:
            continue
        last = last_sync_run(session, source)
        if last is None:
            due.append(source)
            continue
        started = last.started_at if last.started_at.tzinfo else last.started_at.replace(tzinfo=UTC)
        if not sync_run_alive(last, now) and now - started >= timedelta(minutes=source.schedule_minutes):
            due.append(source)
    return due
