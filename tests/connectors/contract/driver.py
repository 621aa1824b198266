"""What the connector contract suite needs from each connector: a *driver* that changes documents on the real
server (or stub) the way a user would, and builds the connector for the current state of its config.

To plug a connector into the suite, add ``tests/connectors/contract/drivers/<kind>.py`` defining:

- ``KIND``: the connector kind;
- ``SUPPORTS_RATE_LIMITS``: whether ``Driver.rate_limit`` works (the rate-limit test runs only for those);
- ``serve(tmp: Path) -> ContextManager[Any]``: starts the server once per test session (a failure to start when
  its binary is missing must fail under CI: use ``ferret_testing.skip_or_fail``);
- ``make_driver(server, tmp: Path, source: str) -> Driver``: a driver on a fresh, empty namespace of that server
  (a new bucket, table, repository, site section, space...) so tests do not see each other's documents.

Every document a driver creates starts readable by ``principal("staff")``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ferret.core.sources.incremental import IncrementalConnector


class Driver(ABC):
    kind: ClassVar[str]

    def __init__(self, source: str) -> None:
        self.source = source

    def principal(self, group: str) -> str:
        """The principal a group of this source becomes in the index."""
        return f"{self.source}:group:{group}"

    @abstractmethod
    def connector(self) -> IncrementalConnector:
        """A new connector for the source as configured now (tests build one per sync, as the service does)."""

    @abstractmethod
    def create(self, key: str, title: str, text: str) -> str:
        """Create a document readable by group ``staff``; returns its external id."""

    @abstractmethod
    def edit(self, key: str, text: str) -> None: ...

    @abstractmethod
    def rename(self, key: str, new_key: str) -> str:
        """Rename or move the document; returns its new external id."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def set_groups(self, key: str, groups: list[str]) -> None:
        """Change who may read the document, nothing else."""

    @abstractmethod
    def create_oversized(self, key: str) -> str:
        """Create an item the connector must skip with a reason (over its size limit); returns its external id."""

    @abstractmethod
    def outage(self, down: bool) -> None:
        """Make the source unreachable or failing (5xx, refused connections) until called with ``False``."""

    def rate_limit(self, requests: int) -> None:
        """Answer the next ``requests`` requests with 429 and ``Retry-After``."""
        raise NotImplementedError(f"the {self.kind} driver has no rate limiting")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Drop what the driver created."""
