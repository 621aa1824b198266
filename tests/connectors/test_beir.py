from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferret.connectors.beir import BeirConnector, iter_corpus, load_qrels, load_queries
from ferret.core.errors import InvalidInputError
from ferret.core.sources.documents import Document

MakeJsonl = Callable[[Path, list[Any]], Path]


def test_corpus_becomes_documents(beir_dataset: Path) -> None:
    documents = list(BeirConnector(path=str(beir_dataset), name="mini").load_from_source())

    assert all(isinstance(item, Document) for item in documents)
    rows = [(item.external_id, item.title, item.text) for item in documents if isinstance(item, Document)]
    assert rows == [
        ("d1", "Aspirin", "Aspirin reduces fever."),
        ("d2", "", "Ibuprofen is an NSAID."),
        ("d3", "Sleep", "Adults need seven hours of sleep."),
    ]
    first = documents[0]
    assert isinstance(first, Document)
    assert first.source == "mini"
    assert first.metadata == {"year": 1999}
    assert [item.metadata for item in documents[1:] if isinstance(item, Document)] == [{}, {}]
    assert list(BeirConnector(path=beir_dataset).list_external_ids()) == ["d1", "d2", "d3"]
    assert BeirConnector(path=beir_dataset).source_name == "beir"


def test_queries_read_only_id_and_text(beir_dataset: Path) -> None:
    assert load_queries(beir_dataset) == {"q1": "does aspirin lower fever", "q2": "how much sleep"}
    assert load_queries(beir_dataset / "queries.jsonl") == load_queries(beir_dataset)


def test_qrels_by_split(beir_dataset: Path) -> None:
    assert load_qrels(beir_dataset, "test") == {"q1": {"d1": 1}, "q2": {"d3": 2, "d2": 0}}
    assert load_qrels(beir_dataset, "train") == {"q1": {"d1": 1}}


def test_blank_lines_and_numeric_ids_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text(
        '\n{"_id": 7, "title": "T", "text": "seven"}\n\n   \n{"_id": "8", "text": "eight"}\n',
        encoding="utf-8",
    )

    records = list(iter_corpus(tmp_path))

    assert [(record.doc_id, record.title, record.text) for record in records] == [
        ("7", "T", "seven"),
        ("8", "", "eight"),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('["d9", "text"]', "not a JSON object"),
        ('{"title": "t", "text": "x"}', "missing '_id'"),
        ('{"_id": "", "text": "x"}', "'_id' must be a non-empty string"),
        ('{"_id": null, "text": "x"}', "'_id' must be a non-empty string"),
        ('{"_id": "d9", "title": "t"}', "missing 'text'"),
        ('{"_id": "d9", "text": 42}', "'text' must be a string"),
        ('{"_id": "d9", "title": ["t"], "text": "x"}', "'title' must be a string"),
        ('{"_id": "d1", "text": "again"}', "duplicate '_id' 'd1'"),
    ],
)
def test_malformed_corpus_line_names_file_and_line(beir_dataset: Path, line: str, problem: str) -> None:
    corpus = beir_dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")

    with pytest.raises(InvalidInputError) as raised:
        list(BeirConnector(path=beir_dataset).load_from_source())

    assert str(raised.value).startswith(f"corpus.jsonl line 5: {problem}")


def test_malformed_query_line_names_file_and_line(beir_dataset: Path, make_jsonl: MakeJsonl) -> None:
    make_jsonl(beir_dataset / "queries.jsonl", [{"_id": "q1", "text": "fine"}, {"_id": "q2", "text": None}])

    with pytest.raises(InvalidInputError, match=r"^queries.jsonl line 2: 'text' must be a string; each line"):
        load_queries(beir_dataset)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "\xff"}\n')

    with pytest.raises(InvalidInputError, match=r"^corpus.jsonl line 2: not valid UTF-8"):
        list(iter_corpus(tmp_path))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\n", r"test.tsv line 2: expected 3 tab-separated fields"),
        ("query-id\tcorpus-id\tscore\n\nq1\td1\thigh\n", r"test.tsv line 3: score 'high' is not an integer"),
        ("q1\td1\t1\nq1\td2\t1\textra\n", r"test.tsv line 2: expected 3 tab-separated fields .* found 4"),
    ],
)
def test_malformed_qrels_row_names_file_and_line(beir_dataset: Path, rows: str, message: str) -> None:
    (beir_dataset / "qrels" / "test.tsv").write_text(rows, encoding="utf-8")

    with pytest.raises(InvalidInputError, match=message):
        load_qrels(beir_dataset, "test")


def test_qrels_without_header_are_read(beir_dataset: Path) -> None:
    (beir_dataset / "qrels" / "test.tsv").write_text("q1 d1 1\n", encoding="utf-8")

    assert load_qrels(beir_dataset, "test") == {"q1": {"d1": 1}}


def test_missing_split_lists_available_splits(beir_dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"No qrels for split 'dev'.*available splits: test, train"):
        load_qrels(beir_dataset, "dev")
    with pytest.raises(InvalidInputError, match="available splits: none"):
        load_qrels(tmp_path, "test")


def test_missing_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"has no corpus\.jsonl; point 'path' at an unpacked BEIR"):
        BeirConnector(path=tmp_path)
    with pytest.raises(InvalidInputError, match=r"has no queries\.jsonl"):
        load_queries(tmp_path)
    with pytest.raises(InvalidInputError, match="does not exist"):
        list(iter_corpus(tmp_path / "missing"))
    with pytest.raises(InvalidInputError, match="needs 'path'"):
        BeirConnector()
    with pytest.raises(InvalidInputError, match="Unknown BEIR connector config keys split"):
        BeirConnector(path=tmp_path, split="test")


def test_loader_never_reads_query_metadata(beir_dataset: Path, make_jsonl: MakeJsonl) -> None:
    # Labels in a query's metadata must not reach Ferret, whatever their shape.
    make_jsonl(
        beir_dataset / "queries.jsonl",
        [{"_id": "q1", "text": "aspirin", "metadata": {"answer": "d1"}, "title": 7, "relevant": ["d1"]}],
    )

    queries = load_queries(beir_dataset)

    assert queries == {"q1": "aspirin"}
    assert "d1" not in json.dumps(queries)
