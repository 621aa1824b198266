"""Request and response bodies of the HTTP API's admin resources (corpora, tasks, jobs, index versions, keys,
search configurations, audit), and the types and checks every body shares, with the limits that keep one request
cheap and harmless. What search and ingest keys send and receive is in ``document_schemas``.

Request models forbid unknown fields (a typo is an error, not a silently ignored option) and refuse text that no
database stores: NUL characters (PostgreSQL rejects them) and lone surrogates (not encodable as UTF-8).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

from ferret.core.db.models import ApiKeyScope, IndexState, JobState
from ferret.core.encoder.registry import BASE_MODEL_NAME
from ferret.core.search.configuration import DEFAULT_RERANK_DEPTH, DEFAULT_RERANK_WEIGHT
from ferret.core.search.fusion import DEFAULT_FUSION, FusionMethod, Normalisation
from ferret.core.sources import limits
from ferret.core.synth.task_spec import ExampleSpec, GenerationSettings, TaskSpec

INT64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]

ExternalId = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
GroupName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
SourceName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MetadataKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
KeywordValue = Annotated[str, StringConstraints(max_length=1024)]
KeywordValues = Annotated[list[KeywordValue], Field(min_length=1, max_length=100)]
CorpusName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]


def _as_utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes (stored in UTC): answer with the same instant whatever the database.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = Annotated[datetime, AfterValidator(_as_utc)]
JsonObject = Annotated[dict[str, Any], BeforeValidator(lambda value: {} if value is None else value)]
"""A JSON column that may be NULL in the row: answered as an empty object."""


class FromAttributes(BaseModel):
    """A response body read from an object's attributes (a row, a search result, a report): ``model_validate(row)``."""

    model_config = ConfigDict(from_attributes=True)


def _unstorable(value: Any) -> str | None:
    """Why some value (key or value, at any depth) cannot be stored in the database and the index, or None.

    Walks with an explicit stack: a body nested thousands of levels deep must get a 422, not a RecursionError."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        else:
            reason = limits.scalar_problem(item)
            if reason is not None and not reason.startswith("values must be JSON"):
                return reason
    return None


def _within_metadata_limits(metadata: dict[str, Any]) -> dict[str, Any]:
    reason = limits.metadata_problem(metadata)
    if reason is not None:
        raise ValueError(reason)
    return metadata


PushMetadata = Annotated[dict[str, Any], AfterValidator(_within_metadata_limits)]


def _refuse_unstorable(data: Any) -> Any:
    reason = _unstorable(data)
    if reason is not None:
        raise ValueError(reason)
    return data


class ApiRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        return _refuse_unstorable(data)


class ErrorOut(BaseModel):
    """Every error: one sentence in ``detail``; request validation errors also list each problem."""

    detail: str
    errors: list[dict[str, Any]] | None = None


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    version: str


# -- corpora ----------------------------------------------------------------------------------------------------
class CorpusIn(ApiRequest):
    name: CorpusName
    description: str = Field(default="", max_length=2_000)
    max_passage_tokens: int | None = Field(default=None, ge=32, le=510, description="Default: the server's setting.")
    passage_overlap_tokens: int | None = Field(default=None, ge=0, le=254, description="Default: the server's.")


class CorpusOut(BaseModel):
    name: str
    description: str
    max_passage_tokens: int
    passage_overlap_tokens: int
    documents: int = Field(description="Documents the caller may read (all of them for an admin key).")
    passages: int = Field(description="Passages of those documents.")
    active_index_version: int | None
    created_at: Timestamp


class CorpusList(BaseModel):
    corpora: list[CorpusOut]


# -- tasks ------------------------------------------------------------------------------------------------------
class TaskIn(TaskSpec):
    """A retrieval task, as ``ferret task import`` reads it from YAML."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        return _refuse_unstorable(data)


class TaskOut(BaseModel):
    name: str
    corpus: str
    description: str
    e_doc: str
    e_query: str
    zero_shot: bool
    generation: GenerationSettings
    examples: list[ExampleSpec]
    runs: int
    created_at: Timestamp


class TaskList(BaseModel):
    tasks: list[TaskOut]


# -- jobs -------------------------------------------------------------------------------------------------------
class PipelineConfigIn(ApiRequest):
    """``ferret.core.pipeline.promptagator.state.PipelineConfig`` with bounds (a test keeps the fields in step)."""

    queries_per_doc: int | None = Field(default=None, ge=1, le=8)
    max_documents: int | None = Field(default=None, ge=1)
    round_trip: str = Field(default="base", min_length=1, max_length=128)
    basic_filters: bool = True
    logprob_quantile: float | None = Field(default=None, gt=0.0, lt=1.0)
    round_trip_k: int | None = Field(
        default=None, ge=1, le=100, description="Round-trip depth; null: from the task's examples (10 to 100)."
    )
    best_of_n: bool = False
    held_out_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)
    learning_rate: float = Field(default=1e-5, gt=0.0, le=1.0)
    max_steps: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=2, le=4096)
    base_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    hard_negatives: Literal["none", "bm25", "residual"] = "none"
    cropping_warmup_steps: int = Field(default=0, ge=0, le=100_000)
    init: str | None = Field(
        default=None, pattern=r"^realm:.+$", max_length=140, description="realm:<model>: start from a REALM model."
    )
    promote: Literal["auto", "force", "never"] = "auto"
    model_name: str | None = Field(default=None, min_length=1, max_length=128)
    seed: int = Field(default=13, ge=0, le=2**31 - 1)
    configure: bool = True
    reranker: bool = False
    distill: bool = Field(default=False, description="With reranker: distil a kept reranker into the retriever.")
    expand: bool = Field(
        default=False, description="Append the kept queries to their documents' BM25 vectors in a new index version."
    )


class JobIn(ApiRequest):
    task: str = Field(min_length=1, max_length=128, description="Name of the retrieval task to train for.")
    config: PipelineConfigIn = Field(default_factory=PipelineConfigIn)


class IndexBuildIn(ApiRequest):
    model: str = Field(default="base", min_length=1, max_length=128, description="Model version to embed with.")
    promote: bool = Field(default=False, description="Make the new version active once it is complete.")


class JobOut(FromAttributes):
    id: int
    kind: str
    corpus_id: int | None
    state: JobState
    stage: str
    progress: float
    counts: JsonObject
    params: JsonObject
    error: str | None
    cancel_requested: bool
    result: dict[str, Any] | None
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None


class JobList(BaseModel):
    jobs: list[JobOut]


# -- index versions ---------------------------------------------------------------------------------------------
class IndexVersionOut(BaseModel):
    version: int
    collection: str
    model: str
    expansion: dict[str, Any] | None = Field(
        default=None,
        description="Document expansion: what its BM25 vectors also hold (run, documents, queries); null for a plain "
        "build. Only a search configuration naming it searches an expanded version.",
    )
    state: IndexState
    passage_count: int
    point_count: int
    error: str | None
    created_at: Timestamp
    ready_at: Timestamp | None
    activated_at: Timestamp | None
    activated_by: str | None = Field(
        default=None, description="Who last made it active: key:<name>, cli:<user>@<host> or system."
    )
    activated_via: str | None = Field(default=None, description="promote or rollback.")
    note: str | None = Field(
        default=None,
        description="On a promotion or rollback: why searches do not change (an active search configuration "
        "reads another model's index).",
    )


class ActivationOut(BaseModel):
    version: int
    activated_at: Timestamp
    actor: str
    via: str = Field(description="promote or rollback.")
    withdrawn: bool = Field(description="A rollback went past it: the next rollback does not return to it.")


class IndexVersionList(BaseModel):
    corpus: str
    versions: list[IndexVersionOut]
    activations: list[ActivationOut] = Field(
        default_factory=list, description="Every activation, oldest first: what rollback walks back through."
    )


# -- API keys ---------------------------------------------------------------------------------------------------
ApiKeyName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$")]


class ApiKeyIn(ApiRequest):
    name: ApiKeyName
    scopes: list[ApiKeyScope] = Field(
        min_length=1,
        max_length=4,
        description="`owner` implies `admin`, which implies the others. Only an owner key may grant `owner`.",
    )
    acl_groups: list[GroupName] = Field(
        default_factory=list, max_length=100, description="Search sees documents of these groups and public ones."
    )


class ApiKeyOut(FromAttributes):
    name: str
    prefix: str = Field(description="The public head of the key (`fk_<prefix>_…`), to tell keys apart in logs.")
    scopes: list[str]
    acl_groups: list[str]
    created_at: Timestamp
    last_used_at: Timestamp | None
    revoked_at: Timestamp | None


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The key itself: shown this once, never stored (only its SHA-256 is).")


class ApiKeyList(BaseModel):
    keys: list[ApiKeyOut]


class SearchConfigOut(BaseModel):
    version: int
    active: bool
    retriever: str
    fusion: str
    reranker: str | None
    rerank_depth: int
    rerank_weight: float
    index_version: int | None = Field(description="The expanded index version it searches; null: its retriever's.")
    expansion: dict[str, Any] | None = Field(description="What that version appended to its BM25 vectors.")
    guard: dict[str, Any] | None
    note: str
    created_at: str | None
    activated_at: str | None


class SearchConfigCreate(BaseModel):
    """A search configuration made by hand; stored, not active (promote it by version)."""

    model_config = ConfigDict(extra="forbid")

    retriever: str = Field(
        default=BASE_MODEL_NAME, max_length=128, description="The dual encoder the first stage searches."
    )
    fusion: FusionMethod = Field(default=DEFAULT_FUSION.method, description="How hybrid search fuses dense and BM25.")
    alpha: float = Field(
        default=DEFAULT_FUSION.weight, ge=0.0, le=1.0, description="A convex fusion's dense share (1: dense only)."
    )
    normalisation: Normalisation = Field(
        default=DEFAULT_FUSION.normalisation, description="A convex fusion's score scaling."
    )
    reranker: str | None = Field(default=None, max_length=128, description="A trained cross-encoder, or none.")
    rerank_depth: int = Field(
        default=DEFAULT_RERANK_DEPTH, ge=1, le=1000, description="Documents the reranker reads per query."
    )
    rerank_weight: float = Field(
        default=DEFAULT_RERANK_WEIGHT, ge=0.0, le=1.0, description="The reranker's share of the fused score."
    )
    note: str = Field(default="", max_length=500)
    index_version: int | None = Field(
        default=None, ge=1, description="The index version it searches, built by the retriever (an expanded one)."
    )


class SearchConfigList(BaseModel):
    corpus: str
    configs: list[SearchConfigOut]
    activations: list[ActivationOut] = Field(
        default_factory=list, description="Every activation, oldest first: what rollback walks back through."
    )


# -- audit ------------------------------------------------------------------------------------------------------
class AuditEventOut(BaseModel):
    id: int
    at: Timestamp
    actor: str = Field(description="`key:<name>`, `cli:<user>@<host>`, `admin:<user>@<host>` or `system`.")
    action: str = Field(description="apikey.create, apikey.revoke, index.promote, index.rollback, index.unreadable, …")
    target: str = Field(description="The key's name or the corpus's name.")
    detail: dict[str, Any]


class AuditEventList(BaseModel):
    events: list[AuditEventOut] = Field(description="Newest first.")
