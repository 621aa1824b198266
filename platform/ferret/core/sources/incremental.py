"""The port of incremental, resumable, permission-aware connectors (issue 14's framework).

A connector that implements ``IncrementalConnector`` is driven by ``ferret.core.sources.sync.SourceSync``:

``sync(cursor)``
    yields, in any order that suits the source, ``Document`` (new or possibly changed), ``SkippedItem`` (with its
    reason), ``Deleted`` (a delta's explicit deletion marker) and ``CursorMark``. A ``CursorMark`` says "every item
    the source had up to here has been yielded; a sync that starts again from this opaque cursor loses nothing".
    The engine persists the latest mark every ``checkpoint_every`` documents (together with the documents before it,
    in one transaction), so an interrupted sync resumes from the last persisted mark instead of from the start.
    Re-delivering a document after a resume is harmless: unchanged content is recognised by its content hash.
    ``cursor=None`` means a first (full) sync. The cursor is any JSON value (a delta link, a commit SHA, a
    watermark with some overlap, a page token); the engine never looks inside it. The last mark of a sync must
    be the cursor the next sync starts from.

``list_external_ids()``
    (``SlimConnector``) the id of every document the source holds now, used to prune deletions. It must be
    complete or raise (``IncompleteListingError`` or any exception): the engine deletes nothing when it raises, and
    it also refuses to prune when the listing is empty while documents are indexed unless the connector says an
    empty source is legitimate (``empty_listing_is_valid``).

``iter_permissions()`` (optional, ``PermissionPass``)
    a separate, cheap pass yielding ``(external_id, principals)`` of every document, for sources whose permission
    edits do not show up in the incremental cursor (Confluence restrictions, S3 object tags, a config mapping). A
    change of principals alone updates the database row and the payload of every live index version without
    re-embedding.

``group_memberships()`` (optional, ``GroupSource``)
    the members of the source's groups (``GroupMembership``), synced with the documents; API keys whose principals
    are members then search as those groups too (``ferret.core.db.source.expand_principals``).

Principals are strings (``ferret.core.sources.principals``): ``public``, ``user:<email>``, ``<source>:group:<name>``.
A connector puts them in ``Document.acl_groups``; two-layer sources flatten with ``principals.flatten_layers``.

Example (a toy source with a watermark cursor)::

    class Notes(IncrementalConnector, SlimConnector):
        kind = "notes"

        def sync(self, cursor):
            since = cursor or 0
            for note in db.notes_changed_since(since - 60):      # a minute of overlap: re-delivery is harmless
                yield Document(external_id=note.id, text=note.body, source=self.source_name,
                               acl_groups=[group_principal(self.source_name, note.team)])
                yield CursorMark(cursor=note.modified)           # notes come in modification order

        def list_external_ids(self):
            return db.all_note_ids()                             # raises on any error: nothing is deleted then
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ferret.core.sources.capabilities import BaseConnector
from ferret.core.sources.documents import Document, SkippedItem


class IncompleteListingError(Exception):
    """A connector could not list every document of its source; the sync must not delete anything."""


class CursorMark(BaseModel):
    """A resumable position: everything the source had before it has been yielded."""

    model_config = ConfigDict(frozen=True)

    cursor: Any


class Deleted(BaseModel):
    """An explicit deletion marker from a source's delta (a ``deleted`` facet, a removed file in a commit diff)."""

    model_config = ConfigDict(frozen=True)

    external_id: str = Field(min_length=1, max_length=1024)


class GroupMembership(BaseModel):
    """``member`` (a principal: ``user:<email>`` or another group) belongs to ``group`` (a group principal)."""

    model_config = ConfigDict(frozen=True)

    group: str = Field(min_length=1, max_length=256)
    member: str = Field(min_length=1, max_length=256)


SyncItem = Document | SkippedItem | Deleted | CursorMark
"""What ``IncrementalConnector.sync`` yields."""


class IncrementalConnector(BaseConnector):
    """A source synced incrementally from an opaque cursor; see the module docstring for the contract."""

    empty_listing_is_valid: ClassVar[bool] = False
    """Whether an empty ``list_external_ids`` may delete every indexed document of the source (off: an empty
    listing of a source that had documents is far more often an outage or a permission problem than a wipe)."""

    @abstractmethod
    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        """Items changed since ``cursor`` (everything when it is ``None``), with ``CursorMark``s at safe points."""

    def close(self) -> None:
        """Release clients, sockets and temporary folders."""


class PermissionPass(BaseConnector):
    """A connector whose permissions can change without the content (and its cursor) changing."""

    @abstractmethod
    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        """``(external_id, principals)`` of every document; must be complete or raise."""


class GroupSource(BaseConnector):
    """A connector that knows who belongs to its groups."""

    @abstractmethod
    def group_memberships(self) -> Iterator[GroupMembership]:
        """Every membership of the source's groups; must be complete or raise (then memberships are kept)."""
