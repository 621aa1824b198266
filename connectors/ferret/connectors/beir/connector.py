"""A BEIR dataset's corpus as a source, so a public benchmark is indexed like an organization's files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.eval.beir import CORPUS_FILE, iter_corpus
from ferret.core.sources.capabilities import ConnectorOutput, LoadConnector, SlimConnector
from ferret.core.sources.documents import Document

_CONFIG_KEYS = ("path", "name")


class BeirConnector(LoadConnector, SlimConnector):
    """Documents from ``<path>/corpus.jsonl``; ``ferret.core.eval.beir`` reads queries and qrels.

    A malformed corpus line raises ``InvalidInputError`` rather than becoming a ``SkippedItem``: a benchmark
    missing documents would report wrong scores.

    Example:
        >>> connector = BeirConnector(path="datasets/scifact", name="scifact")
        >>> next(connector.load_from_source()).external_id
        '4983'
    """

    kind = "beir"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        unknown = sorted(set(config) - set(_CONFIG_KEYS))
        if unknown:
            keys = ", ".join(_CONFIG_KEYS)
            raise InvalidInputError(f"Unknown BEIR connector config keys {', '.join(unknown)}; the keys are {keys}.")
        if not config.get("path"):
            raise InvalidInputError("The BEIR connector needs 'path', the dataset folder holding corpus.jsonl.")
        self.path = Path(config["path"]).expanduser()
        if not (self.path / CORPUS_FILE).is_file():
            raise InvalidInputError(
                f"{self.path} has no {CORPUS_FILE}; point 'path' at an unpacked BEIR dataset folder."
            )

    def check_access(self) -> None:
        """``corpus.jsonl`` exists (checked when built) and its first line can be read."""
        try:
            with (self.path / CORPUS_FILE).open("rb") as corpus:
                corpus.readline()
        except OSError as error:
            raise InvalidInputError(
                f"BEIR source {self.path / CORPUS_FILE} cannot be read ({error.strerror or error}); give the user "
                "Ferret runs as read access to it."
            ) from None

    def load_from_source(self) -> ConnectorOutput:
        for record in iter_corpus(self.path):
            yield Document.or_skipped(
                external_id=record.doc_id,
                title=record.title,
                text=record.text,
                source=self.source_name,
                metadata=record.metadata,
            )

    def list_external_ids(self) -> Iterator[str]:
        for record in iter_corpus(self.path):
            yield record.doc_id
