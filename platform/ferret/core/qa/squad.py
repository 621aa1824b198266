"""Question/answer pairs in SQuAD format, for training the span reader and measuring exact match.

Two layouts are read: the official SQuAD v1.1 JSON file (``data[].paragraphs[].qas[]``), and a BEIR folder whose
``queries.jsonl`` carries ``metadata.answers``, ``metadata.answer_starts`` and ``metadata.gold_paragraph`` (the
shape of ``../shared/datasets/squad-v1.1-dev``, EVALUATION.md). Answer offsets index the passage's text.

Example:
    >>> questions, passages = load_qa_dataset(Path("datasets/squad-v1.1-dev"))
    >>> examples = reading_examples(questions, passages)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.qa.span_reader import ReadingExample


@dataclass(frozen=True)
class QAQuestion:
    question_id: str
    question: str
    answers: tuple[str, ...]
    answer_starts: tuple[int, ...]
    gold_passage: str | None


@dataclass(frozen=True)
class QAPassage:
    passage_id: str
    title: str
    text: str


def _squad_json(path: Path) -> tuple[list[QAQuestion], dict[str, QAPassage]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    questions: list[QAQuestion] = []
    passages: dict[str, QAPassage] = {}
    for a, article in enumerate(data.get("data", [])):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            passage_id = f"a{a:02d}-p{p:03d}"
            passages[passage_id] = QAPassage(passage_id, str(article.get("title", "")), str(paragraph["context"]))
            for qa in paragraph.get("qas", []):
                answers = qa.get("answers", [])
                questions.append(
                    QAQuestion(
                        str(qa["id"]),
                        str(qa["question"]),
                        tuple(str(x["text"]) for x in answers),
                        tuple(int(x["answer_start"]) for x in answers),
                        passage_id,
                    )
                )
    return questions, passages


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _beir_folder(folder: Path) -> tuple[list[QAQuestion], dict[str, QAPassage]]:
    passages = {
        str(row["_id"]): QAPassage(str(row["_id"]), str(row.get("title", "")), str(row.get("text", "")))
        for row in _jsonl(folder / "corpus.jsonl")
    }
    questions = []
    for row in _jsonl(folder / "queries.jsonl"):
        metadata = row.get("metadata") or {}
        if not metadata.get("answers"):
            continue
        questions.append(
            QAQuestion(
                str(row["_id"]),
                str(row["text"]),
                tuple(str(x) for x in metadata["answers"]),
                tuple(int(x) for x in metadata.get("answer_starts", [])),
                metadata.get("gold_paragraph"),
            )
        )
    return questions, passages


def load_qa_dataset(path: Path) -> tuple[list[QAQuestion], dict[str, QAPassage]]:
    """Questions with their answers, and the passages they were asked about; one sentence for an unusable path."""
    if path.is_file() and path.suffix == ".json":
        questions, passages = _squad_json(path)
    elif (path / "queries.jsonl").is_file() and (path / "corpus.jsonl").is_file():
        questions, passages = _beir_folder(path)
    else:
        raise InvalidInputError(
            f"{path} is neither a SQuAD v1.1 JSON file nor a BEIR folder with corpus.jsonl and queries.jsonl."
        )
    if not questions:
        raise InvalidInputError(f"{path} holds no question with an answer.")
    return questions, passages


def reading_examples(questions: Sequence[QAQuestion], passages: dict[str, QAPassage]) -> list[ReadingExample]:
    """One training pair per question: its first answer located in its gold passage (pairs whose offset does not
    point at the answer are left out, as SQuAD's own preprocessing does)."""
    examples = []
    for question in questions:
        passage = passages.get(question.gold_passage or "")
        if passage is None or not question.answer_starts:
            continue
        answer, start = question.answers[0], question.answer_starts[0]
        if passage.text[start : start + len(answer)] == answer:
            examples.append(ReadingExample(question.question, passage.text, answer, start))
    return examples
