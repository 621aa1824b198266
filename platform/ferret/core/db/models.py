"""Relational state of Ferret as typed SQLAlchemy 2.0 models.

Changing a model means writing an Alembic migration in ``migrations/versions`` by hand; the migration tests
check that upgrading a fresh database yields exactly these tables.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ferret.core.corpus.chunking import DEFAULT_PASSAGE_TOKENS


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[str]: JSON,
        datetime: DateTime(timezone=True),
    }


class IndexState(enum.StrEnum):
    """Life of an index version: built completely, then promoted; superseded versions stay ready for rollback."""

    BUILDING = "building"
    READY = "ready"
    ACTIVE = "active"
    RETIRED = "retired"
    FAILED = "failed"


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


def _enum(kind: type[enum.StrEnum], name: str) -> Enum:
    # Stored as plain strings with a CHECK constraint: portable between SQLite and PostgreSQL, easy to migrate.
    return Enum(
        kind,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda e: [m.value for m in e],
    )


class Corpus(Base):
    __tablename__ = "corpora"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # Chunking settings fixed at creation, so every index version of a corpus embeds the same passages.
    max_passage_tokens: Mapped[int] = mapped_column(Integer, default=DEFAULT_PASSAGE_TOKENS)
    passage_overlap_tokens: Mapped[int] = mapped_column(Integer, default=32)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    documents: Mapped[list[Document]] = relationship(back_populates="corpus", cascade="all, delete-orphan")


class Source(Base):
    """A connected document source of a corpus and the checkpoint of its last incremental poll."""

    __tablename__ = "sources"
    __table_args__ = (UniqueConstraint("corpus_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """``{"cursor": ...}`` of an incremental connector's last persisted ``CursorMark`` (``{"last_polled_at": ...}``
    for the older poll connectors); ``config`` holds secret *references* (``{"env": ...}``), never their values."""
    last_run_at: Mapped[datetime | None] = mapped_column(default=None)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    schedule_minutes: Mapped[int | None] = mapped_column(Integer, default=None)
    """Sync every this many minutes (Celery beat or the embedded scheduler); ``None``: only when asked."""
    created_at: Mapped[datetime | None] = mapped_column(default=utcnow)


class SyncState(enum.StrEnum):
    """Life of one sync of a source; an interrupted one resumes from its last persisted cursor next time."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class SyncRun(Base):
    """One sync of a source and its report: counts (new, changed, unchanged, deleted, permission updates),
    skipped items with their reasons, the error that stopped it, and its duration."""

    __tablename__ = "sync_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), index=True)
    state: Mapped[SyncState] = mapped_column(_enum(SyncState, "sync_state"), default=SyncState.RUNNING)
    trigger: Mapped[str] = mapped_column(String(16), default="manual")
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    skipped: Mapped[list[Any]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    owner: Mapped[str | None] = mapped_column(String(255), default=None)
    """``<host>:<pid>:<start>`` of the process running the sync (``run_owner``): a running row whose process is gone
    is a sync that was killed, not one to wait for."""


class GroupMember(Base):
    """A group membership a source reported: ``member`` (a user or group principal) is in ``group``."""

    __tablename__ = "group_members"
    __table_args__ = (
        UniqueConstraint("source_id", "group_principal", "member"),
        Index("ix_group_members_member", "member"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"))
    group_principal: Mapped[str] = mapped_column(String(256))
    member: Mapped[str] = mapped_column(String(256))


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("corpus_id", "source", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(String(256))
    external_id: Mapped[str] = mapped_column(String(1024))
    title: Mapped[str] = mapped_column(Text, default="")
    body: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    acl_groups: Mapped[list[str]] = mapped_column(default=list)
    content_hash: Mapped[str] = mapped_column(String(64))
    version: Mapped[str | None] = mapped_column(String(256), default=None)
    """The source's own version of the document (push API): an upsert with the version already stored is a no-op."""
    source_updated_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the source last changed the document; a push carrying an older ``updated_at`` is ignored."""
    quarantine_reason: Mapped[str | None] = mapped_column(Text, default=None)
    """Why the index refused this document: it stays in the database (listed, deletable) but reaches no shard."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    corpus: Mapped[Corpus] = relationship(back_populates="documents")
    passages: Mapped[list[Passage]] = relationship(
        back_populates="document", cascade="all, delete-orphan", order_by="Passage.ordinal"
    )


class Passage(Base):
    """A chunk of at most ``max_passage_tokens`` wordpieces of the encoder's tokenizer, title included."""

    __tablename__ = "passages"
    __table_args__ = (UniqueConstraint("document_id", "ordinal"), Index("ix_passages_corpus", "corpus_id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)

    document: Mapped[Document] = relationship(back_populates="passages")


class ModelVersion(Base):
    """A dual encoder in the model registry: a row here and its files under ``FERRET_HOME/models``."""

    __tablename__ = "model_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(32), default="dual_encoder")
    path: Mapped[str] = mapped_column(Text)
    dimension: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"), default=None)
    training_config: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class IndexVersion(Base):
    """One Qdrant collection (server) or shard (embedded) holding a corpus embedded by one model version."""

    __tablename__ = "index_versions"
    __table_args__ = (UniqueConstraint("corpus_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    model_version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    version: Mapped[int] = mapped_column(Integer)
    collection: Mapped[str] = mapped_column(String(256), unique=True)
    backend: Mapped[str] = mapped_column(String(16))
    state: Mapped[IndexState] = mapped_column(_enum(IndexState, "index_state"), default=IndexState.BUILDING)
    passage_count: Mapped[int] = mapped_column(Integer, default=0)
    point_count: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    expansion: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """Document expansion (issue 12, item 6): what was appended to the passages' BM25 vectors (the run, its key,
    how many documents and queries); None for a plain build, the only kind a model's own search finds."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ready_at: Mapped[datetime | None] = mapped_column(default=None)
    activated_at: Mapped[datetime | None] = mapped_column(default=None)

    model_version: Mapped[ModelVersion] = relationship()
    corpus: Mapped[Corpus] = relationship()


class SearchConfig(Base):
    """A search system, the unit of promotion (issue 12): retriever model + fusion + optional reranker.

    Versioned per corpus and promoted or rolled back as one unit. Models are referenced by id and by name: a
    deleted model leaves its name, so the error can say which one is missing."""

    __tablename__ = "search_configs"
    __table_args__ = (UniqueConstraint("corpus_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    retriever_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id", ondelete="SET NULL"), default=None)
    retriever_name: Mapped[str] = mapped_column(String(128))
    fusion: Mapped[dict[str, Any]] = mapped_column(default=dict)
    reranker_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id", ondelete="SET NULL"), default=None)
    reranker_name: Mapped[str | None] = mapped_column(String(128), default=None)
    rerank_depth: Mapped[int] = mapped_column(Integer, default=0)
    rerank_weight: Mapped[float] = mapped_column(Double, default=0.5)
    index_version_id: Mapped[int | None] = mapped_column(ForeignKey("index_versions.id"), default=None)
    """The index it searches when that is not its retriever's plain index (an expanded one); None: the plain one."""
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """How the fusion weight was chosen and the guard's figures and decision."""
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    activated_at: Mapped[datetime | None] = mapped_column(default=None)

    retriever: Mapped[ModelVersion | None] = relationship(foreign_keys=[retriever_id])
    reranker: Mapped[ModelVersion | None] = relationship(foreign_keys=[reranker_id])
    index_version: Mapped[IndexVersion | None] = relationship()


class Activation(Base):
    """One activation of an index version (``kind`` "index") or a search configuration ("config") of a corpus.

    The rows not ``withdrawn``, oldest first, are the stack a rollback walks back (v3 → v2 → v1): a rollback
    withdraws the current row and its target's row and adds the target again (``via`` "rollback"), so the next
    rollback goes one further back. Every row stays as the history `ferret index list` shows."""

    __tablename__ = "activations"

    id: Mapped[int] = mapped_column(primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    activated_at: Mapped[datetime] = mapped_column(default=utcnow)
    actor: Mapped[str] = mapped_column(String(256))
    via: Mapped[str] = mapped_column(String(16), default="promote")
    withdrawn: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Job(Base):
    """A unit of long work (ingest, index build, training) and its progress, shown by the CLI and admin."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    corpus_id: Mapped[int | None] = mapped_column(ForeignKey("corpora.id", ondelete="SET NULL"), default=None)
    state: Mapped[JobState] = mapped_column(_enum(JobState, "job_state"), default=JobState.QUEUED, index=True)
    stage: Mapped[str] = mapped_column(String(64), default="")
    progress: Mapped[float] = mapped_column(Double, default=0.0)
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    celery_id: Mapped[str | None] = mapped_column(String(255), default=None)
    """Id of the Celery task or chain running the job; ``embedded:<host>:<pid>`` in embedded mode."""
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Set by a cancel; a running stage polls it between batches and stops."""
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Deliveries of the job's stages: above the number of stages means a redelivery after a worker died."""
    result: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    updated_at: Mapped[datetime | None] = mapped_column(default=None, onupdate=utcnow)
    payload: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The first stage's input (JSON): what a detached runner starts from, and what a retry runs again."""


class ApiKeyScope(enum.StrEnum):
    """What an API key may do; ``admin`` implies search and ingest, ``owner`` implies admin.

    An admin key manages keys only within its own groups (a key it creates gets a subset of them); an owner key
    may grant any group. A leaked admin key therefore reads no more than its own groups."""

    SEARCH = "search"
    INGEST = "ingest"
    ADMIN = "admin"
    OWNER = "owner"


class ApiKey(Base):
    """A caller of the HTTP API. Only the SHA-256 of the key is stored; ``prefix`` is its public head."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(default=list)
    acl_groups: Mapped[list[str]] = mapped_column(default=list)
    """The caller's groups: search only sees documents shared with one of them (or public)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class AuditEvent(Base):
    """Who changed access or what search serves: key created or revoked, index version promoted or rolled back.

    ``actor`` is ``key:<name>`` for an API caller, ``cli:<user>@<host>`` for a command, ``system`` for Ferret
    itself (an unreadable index version replaced automatically). Rows are only ever added."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(256))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(256))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


# Promptagator (Dai et al. 2022): a retrieval task, its few-shot examples, generation runs and their queries.


class GenerationState(enum.StrEnum):
    """Life of a generation run; an interrupted or failed run is resumed by running the task again."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class QueryStatus(enum.StrEnum):
    """A generated query: usable, a failed generation, or dropped by a filter (the reason says which)."""

    OK = "ok"
    FAILED = "failed"
    DROPPED = "dropped"


class RetrievalTask(Base):
    """A retrieval task over a corpus: a description, the prompt's two descriptions and 2-8 examples (or none,
    zero-shot). ``generation`` holds the default generation settings (queries per document, cap, sampling)."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    e_doc: Mapped[str] = mapped_column(String(64), default="Document")
    e_query: Mapped[str] = mapped_column(String(64), default="Query")
    zero_shot: Mapped[bool] = mapped_column(Boolean, default=False)
    generation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    corpus: Mapped[Corpus] = relationship()
    examples: Mapped[list[TaskExample]] = relationship(
        back_populates="task", cascade="all, delete-orphan", order_by="TaskExample.position"
    )


class TaskExample(Base):
    """One (query, document) example of a task. The document is a corpus document (``document_id``; ``source``
    and ``external_id`` find it again after a re-ingest replaced its row) or given as ``document_text``."""

    __tablename__ = "task_examples"
    __table_args__ = (UniqueConstraint("task_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    query: Mapped[str] = mapped_column(Text)
    document_id: Mapped[int | None] = mapped_column(
        ForeignKey("documents.id", ondelete="SET NULL"), default=None, index=True
    )
    source: Mapped[str | None] = mapped_column(String(256), default=None)
    external_id: Mapped[str | None] = mapped_column(String(1024), default=None)
    document_text: Mapped[str | None] = mapped_column(Text, default=None)

    task: Mapped[RetrievalTask] = relationship(back_populates="examples")
    document: Mapped[Document | None] = relationship()


class GenerationRun(Base):
    """One pass of query generation over a task's documents; ``settings`` is the snapshot it ran with and
    ``counters`` what it did (documents, calls, tokens, failures by reason, wall seconds)."""

    __tablename__ = "generation_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    state: Mapped[GenerationState] = mapped_column(
        _enum(GenerationState, "generation_state"), default=GenerationState.RUNNING
    )
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    counters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    owner: Mapped[str | None] = mapped_column(String(255), default=None)
    """``<host>:<pid>`` of the process generating: a run left ``running`` by a process that is gone is interrupted."""

    task: Mapped[RetrievalTask] = relationship()


class SyntheticQuery(Base):
    """Sample ``sample`` of a run for one document. ``reason`` says why it failed or was dropped; ``score`` holds
    the round-trip rank of its document when that filter ran."""

    __tablename__ = "synthetic_queries"
    __table_args__ = (UniqueConstraint("run_id", "document_id", "sample"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("generation_runs.id", ondelete="CASCADE"))
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    sample: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[QueryStatus] = mapped_column(_enum(QueryStatus, "query_status"), default=QueryStatus.OK)
    reason: Mapped[str | None] = mapped_column(String(128), default=None)
    score: Mapped[float | None] = mapped_column(Double, default=None)
    logprob: Mapped[float | None] = mapped_column(Double, default=None)
    """The generator's mean token log-probability of the query (``Completion.logprob``); None when the backend
    gave none or the row predates revision 0019."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
