"""What connectors hand to Ferret: documents, skipped items with their reason, and checkpoints."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ferret.core.acl import PUBLIC_GROUP
from ferret.core.sources.limits import document_problem


class Document(BaseModel):
    """A document as a source delivers it, before chunking.

    Example:
        >>> Document(external_id="handbook.md", title="Handbook", text="Leave policy ...").content_hash[:8]
        '...'
    """

    model_config = ConfigDict(frozen=True)

    external_id: str = Field(min_length=1, max_length=1024)
    title: str = ""
    text: str
    source: str = "default"
    metadata: dict[str, Any] = Field(default_factory=dict)
    acl_groups: list[str] = Field(default_factory=lambda: [PUBLIC_GROUP])
    updated_at: datetime | None = None

    @model_validator(mode="after")
    def _within_limits(self) -> Document:
        """No document beyond the payload limits exists at all, whichever connector or API built it."""
        reason = document_problem(
            external_id=self.external_id,
            title=self.title,
            text=self.text,
            source=self.source,
            metadata=self.metadata,
            acl_groups=self.acl_groups,
        )
        if reason is not None:
            raise ValueError(reason)
        return self

    @classmethod
    def or_skipped(cls, **fields: Any) -> Document | SkippedItem:
        """The document, or a ``SkippedItem`` saying why it cannot be indexed: what a connector yields for data
        from its source, so one bad record is reported instead of stopping the whole load."""
        try:
            return cls(**fields)
        except ValidationError as error:
            first = error.errors()[0]
            reason = str(first.get("msg", "invalid document")).removeprefix("Value error, ")
            return SkippedItem(external_id=str(fields.get("external_id", "?"))[:1024], reason=reason)

    @property
    def content_hash(self) -> str:
        """SHA-256 over everything that changes the embedded text or its metadata; same hash = not re-embedded.

        The ACL groups are left out on purpose: permissions are compared on their own, and a permission-only change
        updates the database row and the index payload without re-embedding (``ferret.core.sources.sync``)."""
        blob = json.dumps([self.title, self.text, self.metadata], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


class SkippedItem(BaseModel):
    """An item a connector could not turn into a document, listed in the ingest report with its reason."""

    model_config = ConfigDict(frozen=True)

    external_id: str
    reason: str


class ConnectorCheckpoint(BaseModel):
    """Where an incremental poll stopped; stored as JSON on the source row and handed back next time."""

    last_polled_at: datetime | None = None
