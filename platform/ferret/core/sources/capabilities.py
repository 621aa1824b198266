"""Capability interfaces of a connector, after Onyx's ``connectors/interfaces.py``.

A connector class inherits the capabilities it has:

- ``LoadConnector``: a full load of everything in the source;
- ``PollConnector``: documents changed since a checkpoint;
- ``SlimConnector``: the ids of every document still in the source, cheap, for pruning deletions;
- ``PermissionConnector``: the ACL groups of a document, where the source has permissions.

Connectors yield ``Document`` or ``SkippedItem``; they never raise for one bad item.

Every connector also answers ``check_access()``: one or two round trips that prove the source can be reached and
read as configured (``ferret source add`` runs it before storing a source, as Onyx runs
``validate_connector_settings``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import datetime
from typing import Any, ClassVar, Protocol

from ferret.core.sources.documents import Document, SkippedItem

ConnectorOutput = Iterator[Document | SkippedItem]


class BaseConnector(ABC):
    """Common part of all connectors: a source kind and a config dict that round-trips through the DB."""

    kind: ClassVar[str]
    scoped_groups: ClassVar[bool] = True
    """Whether the groups it puts on documents carry the source's name (``<source>:group:<name>``, what a store's
    own groups become); False when they are Ferret's own group names written in the config (a folder's ``acl``)."""

    def __init__(self, **config: Any) -> None:
        self.config = config

    def config_json(self) -> dict[str, Any]:
        """The config as stored on the source row: JSON types only (paths become strings)."""
        return json.loads(json.dumps(self.config, default=str))

    @property
    def source_name(self) -> str:
        """Name of the source the documents belong to, unique within a corpus."""
        return str(self.config.get("name") or self.kind)

    def check_access(self) -> None:  # noqa: B027 - a connector with nothing to reach keeps this default
        """Prove, cheaply, that the source can be reached and read as configured; never a full listing.

        One or two round trips (a bucket listing of one key, a share's root folder, ``SELECT ... LIMIT 1``,
        ``git ls-remote``, the start page). A failure raises a ``FerretError`` whose one sentence names the source
        kind, what was tried and what to fix, and never a secret. Every registered connector overrides it
        (``tests/connectors/test_registry.py``).
        """


class LoadConnector(BaseConnector):
    @abstractmethod
    def load_from_source(self) -> ConnectorOutput:
        """Every document the source holds now."""


class PollConnector(BaseConnector):
    @abstractmethod
    def poll_source(self, start: datetime | None, end: datetime) -> ConnectorOutput:
        """Documents created or changed in ``(start, end]``; ``start=None`` means from the beginning."""


class SlimConnector(BaseConnector):
    @abstractmethod
    def list_external_ids(self) -> Iterator[str]:
        """Ids of every document still in the source; anything indexed and not listed was deleted."""


class PermissionConnector(BaseConnector):
    @abstractmethod
    def acl_groups(self, external_id: str) -> list[str]:
        """Groups allowed to see a document."""


class ConnectorFactory(Protocol):
    """How the domain is handed a connector: a source kind and its JSON config in, a connector out.

    ``ferret.connectors.registry.build_connector`` is the implementation the runtime passes in.
    """

    def __call__(self, kind: str, **config: Any) -> BaseConnector: ...
