"""Builders of small real source folders: office files, a hand-written PDF and a BEIR dataset."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docx
import pytest


def build_pdf(lines: list[str], title: str | None = None) -> bytes:
    """A minimal valid one-page PDF (Helvetica text, classic xref table), so tests need no PDF writer."""
    content = "BT /F1 12 Tf 72 720 Td " + " ".join(f"({line}) Tj 0 -16 Td" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(content)} >>\nstream\n{content}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    if title is not None:
        objects.append(f"<< /Title ({title}) >>")
    pdf = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref_at = len(pdf)
    pdf += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    pdf += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    info = f" /Info {len(objects)} 0 R" if title is not None else ""
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R{info} >>"
    pdf += f"trailer\n{trailer}\nstartxref\n{xref_at}\n%%EOF\n".encode()
    return pdf


def build_docx(path: Path, paragraphs: list[str], table: list[list[str]] | None = None, title: str = "") -> Path:
    document = docx.Document()
    document.core_properties.title = title
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, values in zip(grid.rows, table, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    document.save(str(path))
    return path


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# Test modules cannot import this conftest (importlib import mode), so the builders travel as fixtures.
@pytest.fixture
def make_pdf() -> Callable[..., bytes]:
    return build_pdf


@pytest.fixture
def make_docx() -> Callable[..., Path]:
    return build_docx


@pytest.fixture
def make_jsonl() -> Callable[[Path, list[Any]], Path]:
    return write_jsonl


@pytest.fixture
def docs_folder(tmp_path: Path) -> Path:
    """One clean file of every supported format."""
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "notes.txt").write_text("Coffee machine descaling happens every Friday.\n", encoding="utf-8")
    (root / "guides" / "onboarding.md").write_text("# Onboarding\n\nAsk IT for a laptop.\n", encoding="utf-8")
    (root / "guides" / "faq.html").write_text(
        "<html><head><title>FAQ</title></head><body><p>Parking is free.</p></body></html>", encoding="utf-8"
    )
    (root / "report.pdf").write_bytes(build_pdf(["Quarterly revenue grew."], title="Q3 Report"))
    build_docx(root / "policy.docx", ["Remote work is allowed twice a week."], title="Remote Policy")
    return root


@pytest.fixture
def beir_dataset(tmp_path: Path) -> Path:
    """A three-document BEIR dataset with queries (one carrying label metadata) and two qrels splits."""
    root = tmp_path / "beir-mini"
    write_jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Aspirin", "text": "Aspirin reduces fever.", "metadata": {"year": 1999}},
            {"_id": "d2", "title": "", "text": "Ibuprofen is an NSAID."},
            {"_id": "d3", "title": "Sleep", "text": "Adults need seven hours of sleep.", "metadata": "n/a"},
        ],
    )
    write_jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "does aspirin lower fever", "metadata": {"answer": "d1"}},
            {"_id": "q2", "text": "how much sleep"},
        ],
    )
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq2\td2\t0\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root
