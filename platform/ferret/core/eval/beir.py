"""Read a BEIR dataset folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

Format from Thakur et al., "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval
Models" (NeurIPS 2021 Datasets and Benchmarks), section 3. Unlike a live source, a benchmark is all or
nothing: a silently dropped document or query would change the scores, so a malformed line raises
``InvalidInputError`` naming the file and the 1-based line number instead of being skipped.

Example:
    >>> queries = load_queries("datasets/scifact")
    >>> qrels = load_qrels("datasets/scifact", "test")
    >>> sum(len(judged) for judged in qrels.values())
    339
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferret.core.errors import InvalidInputError

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_FOLDER = "qrels"
QRELS_HEADER = ["query-id", "corpus-id", "score"]
_CORPUS_SHAPE = "each line must be a JSON object with '_id', 'title' and 'text'"
_QUERY_SHAPE = "each line must be a JSON object with '_id' and 'text'"


@dataclass(frozen=True)
class CorpusRecord:
    """One line of ``corpus.jsonl``; ``metadata`` is the line's ``metadata`` object, or empty."""

    doc_id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def iter_corpus(path: str | Path) -> Iterator[CorpusRecord]:
    """Corpus records in file order; ``path`` is the dataset folder or the corpus file itself."""
    corpus_file = _dataset_file(path, CORPUS_FILE)
    for where, row in _unique_rows(corpus_file, _CORPUS_SHAPE):
        title = row.get("title") or ""
        if not isinstance(title, str):
            raise InvalidInputError(f"{where}: 'title' must be a string; {_CORPUS_SHAPE}.")
        metadata = row.get("metadata")
        yield CorpusRecord(
            doc_id=row["_id"],
            title=title,
            text=_text(row, where, _CORPUS_SHAPE),
            metadata=dict(metadata) if isinstance(metadata, dict) else {},
        )


def has_documents(path: str | Path) -> bool:
    """Whether the dataset folder holds a ``corpus.jsonl`` with at least one record (read up to the first)."""
    if not (Path(path) / CORPUS_FILE).is_file():
        return False
    return next(iter_corpus(path), None) is not None


def load_queries(path: str | Path) -> dict[str, str]:
    """Query id to query text; ``path`` is the dataset folder or the queries file itself.

    Reads only ``_id`` and ``text``: some datasets put answers or labels in a query's ``metadata``, and
    nothing downstream may see them.
    """
    queries_file = _dataset_file(path, QUERIES_FILE)
    rows = _unique_rows(queries_file, _QUERY_SHAPE)
    return {row["_id"]: _text(row, where, _QUERY_SHAPE) for where, row in rows}


def load_qrels(path: str | Path, split: str) -> dict[str, dict[str, int]]:
    """Relevance judgements of one split: query id to {corpus id: graded relevance}."""
    folder = Path(path) / QRELS_FOLDER
    qrels_file = folder / f"{split}.tsv"
    if not qrels_file.is_file():
        available = sorted(file.stem for file in folder.glob("*.tsv")) if folder.is_dir() else []
        raise InvalidInputError(
            f"No qrels for split '{split}': {qrels_file} does not exist; available splits: "
            f"{', '.join(available) or 'none'}."
        )
    where_file = f"{QRELS_FOLDER}/{qrels_file.name}"
    qrels: dict[str, dict[str, int]] = {}
    first_row = True
    for line_number, line in _lines(qrels_file, where_file):
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [value.strip() for value in fields]
        if first_row and fields == QRELS_HEADER:
            first_row = False
            continue
        first_row = False
        where = f"{where_file} line {line_number}"
        if len(fields) != 3 or not fields[0] or not fields[1]:
            raise InvalidInputError(
                f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), found {len(fields)}."
            )
        query_id, corpus_id, score = fields
        try:
            qrels.setdefault(query_id, {})[corpus_id] = int(score)
        except ValueError:
            raise InvalidInputError(f"{where}: score {score!r} is not an integer.") from None
    return qrels


def _dataset_file(path: str | Path, name: str) -> Path:
    """``path`` itself when it is a file, else ``path/name``; a clear error when neither exists."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise InvalidInputError(f"BEIR dataset folder {path} does not exist; pass the folder holding {name}.")
    file = path / name
    if not file.is_file():
        raise InvalidInputError(
            f"{path} has no {name}; a BEIR dataset folder holds {CORPUS_FILE}, {QUERIES_FILE} "
            f"and {QRELS_FOLDER}/<split>.tsv."
        )
    return file


def _lines(file: Path, label: str) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers, decoded one by one so a bad byte names its line."""
    with file.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InvalidInputError(f"{label} line {line_number}: not valid UTF-8.") from None
            if line.strip():
                yield line_number, line.rstrip("\r\n")


def _unique_rows(file: Path, shape: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """JSON objects with a non-empty string ``_id``, each once, with a "file line N" label for errors."""
    seen: set[str] = set()
    for line_number, line in _lines(file, file.name):
        where = f"{file.name} line {line_number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"{where}: not valid JSON ({error.msg}); {shape}.") from None
        if not isinstance(row, dict):
            raise InvalidInputError(f"{where}: not a JSON object; {shape}.")
        if "_id" not in row:
            raise InvalidInputError(f"{where}: missing '_id'; {shape}.")
        doc_id = row["_id"]
        # Some datasets write numeric ids; they mean the same string as the qrels' ids.
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise InvalidInputError(f"{where}: '_id' must be a non-empty string; {shape}.")
        if doc_id in seen:
            raise InvalidInputError(f"{where}: duplicate '_id' {doc_id!r}; ids must be unique.")
        seen.add(doc_id)
        row["_id"] = doc_id
        yield where, row


def _text(row: dict[str, Any], where: str, shape: str) -> str:
    text = row.get("text")
    if not isinstance(text, str):
        problem = "'text' must be a string" if "text" in row else "missing 'text'"
        raise InvalidInputError(f"{where}: {problem}; {shape}.")
    return text
