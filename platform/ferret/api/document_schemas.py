"""Bodies of what search and ingest keys send and receive: searches, documents read back, and pushes.

The types and checks they share with every other body (``ApiRequest`` refuses unknown fields and unstorable text)
are in ``ferret.api.schemas``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field

from ferret.api.schemas import (
    INT64,
    ApiRequest,
    ExternalId,
    FromAttributes,
    GroupName,
    KeywordValue,
    KeywordValues,
    MetadataKey,
    PushMetadata,
    SourceName,
    Timestamp,
)
from ferret.core.acl import PUBLIC_GROUP
from ferret.core.search.snippets import SNIPPET_CHARS
from ferret.core.sources import limits

MAX_K = 100
MAX_OFFSET = 100
"""Results skipped for a later page: ten pages of ten; a deeper page costs the search that much more."""
MAX_QUERY_CHARS = 2_000


# -- search -----------------------------------------------------------------------------------------------------
class SearchFilters(ApiRequest):
    """Conditions every result must meet, applied inside Qdrant's query like the access filter."""

    source: list[SourceName] | None = Field(default=None, min_length=1, max_length=32, description="Any of these.")
    external_id: list[ExternalId] | None = Field(
        default=None, min_length=1, max_length=100, description="Any of these documents."
    )
    metadata: dict[MetadataKey, KeywordValue | INT64 | KeywordValues] = Field(
        default_factory=dict,
        max_length=16,
        description="Metadata key → value (exact match) or list of values (any of them).",
    )

    def conditions(self) -> dict[str, Any]:
        """Payload key → value or any-of list, as ``SearchRequest.filters`` takes them."""
        conditions: dict[str, Any] = {}
        if self.source is not None:
            conditions["source"] = list(self.source)
        if self.external_id is not None:
            conditions["external_id"] = list(self.external_id)
        for key, value in self.metadata.items():
            conditions[f"metadata.{key}"] = value
        return conditions


def _version_text(value: Any) -> Any:
    """A version number given as a JSON number, as the CLI's ``--config 3`` reads it, taken as its text."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class SearchIn(ApiRequest):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(default=10, ge=1, le=MAX_K, description="Documents to return.")
    offset: int = Field(
        default=0, ge=0, le=MAX_OFFSET, description="Documents to skip first: the next page starts at offset + k."
    )
    mode: Literal["dense", "sparse", "hybrid"] | None = Field(
        default=None, description="Default: the server's FERRET_SEARCH_MODE."
    )
    filters: SearchFilters = Field(default_factory=SearchFilters)
    config: Annotated[str | None, BeforeValidator(_version_text)] = Field(
        default=None,
        max_length=16,
        pattern=r"^(base|[0-9]{1,9})$",
        description="A search configuration for comparisons: 'base' or a version number, 3 or \"3\" (default: the "
        "active one).",
    )


class SearchResultOut(FromAttributes):
    document_id: int
    external_id: str
    title: str
    text: str = Field(description="The best-matching passage of the document.")
    snippet: str = Field(
        default="",
        description=f"About {SNIPPET_CHARS} characters of the passage around the query's first word, cut at whole "
        "words, '…' where text was left out (whitespace collapsed).",
    )
    highlights: list[tuple[int, int]] = Field(
        default_factory=list,
        description="Where the query's words are in the snippet: [start, end) character offsets, in order.",
    )
    score: float
    passage_id: int
    source: str
    metadata: dict[str, Any]


class SearchOut(BaseModel):
    corpus: str
    query: str
    mode: str
    results: list[SearchResultOut]
    took_ms: float


class PassageOut(FromAttributes):
    id: int = Field(description="The passage id search results name (`passage_id`).")
    ordinal: int = Field(description="Position in the document, from 0.")
    text: str


class DocumentOut(BaseModel):
    corpus: str
    document_id: int
    external_id: str
    source: str
    title: str
    metadata: dict[str, Any]
    acl_groups: list[str] = Field(description="The caller's groups this document is shared with (not all of its own).")
    updated_at: Timestamp
    passages: list[PassageOut] = Field(description="Every passage in order; their texts together are the document.")


# -- push API ---------------------------------------------------------------------------------------------------
class PushDocumentIn(ApiRequest):
    external_id: ExternalId
    title: str = Field(default="", max_length=limits.MAX_TITLE_CHARS)
    text: str = Field(max_length=limits.MAX_TEXT_CHARS)
    metadata: PushMetadata = Field(
        default_factory=dict,
        max_length=64,
        description=f"At most {limits.MAX_METADATA_DEPTH} levels deep, {limits.MAX_METADATA_KEYS} keys in all and "
        f"{limits.MAX_METADATA_BYTES // 1024} KiB as JSON.",
    )
    acl_groups: list[GroupName] = Field(
        default_factory=lambda: [PUBLIC_GROUP],
        min_length=1,
        max_length=limits.MAX_ACL_GROUPS,
        description="Groups that may see the document; 'public' is everyone.",
    )
    version: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="The source's version: pushing a version already stored is a no-op.",
    )
    updated_at: datetime | None = None


class PushIn(ApiRequest):
    source: SourceName = Field(default="push", description="Source within the corpus that owns these documents.")
    documents: list[PushDocumentIn] = Field(description="Upserted by external id; at most the server's batch limit.")


class DeleteIn(ApiRequest):
    source: SourceName = "push"
    external_ids: list[ExternalId] = Field(description="Unknown ids are ignored, so a retried delete is harmless.")


class SkippedOut(FromAttributes):
    external_id: str
    reason: str


class PushOut(FromAttributes):
    added: int
    updated: int
    unchanged: int
    deleted: int
    passages_added: int
    passages_deleted: int
    permissions_updated: int = Field(
        0, description="Documents whose content was unchanged but whose ACL groups changed (nothing re-embedded)."
    )
    stale: int = Field(0, description="Documents ignored because their updated_at is older than the stored one.")
    skipped: list[SkippedOut]


class PushAcceptedOut(BaseModel):
    """A push stored durably and queued: its documents are searchable once the job's state is ``succeeded``."""

    job_id: int
    state: str
    documents: int
    job_url: str = Field(description="GET it (admin key) for the state; the push report is its result.")
