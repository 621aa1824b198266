from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.folder_items import document, load, skip_reason
from ferret.core.sources.documents import Document, SkippedItem


def test_every_format_is_parsed_with_its_title(docs_folder: Path) -> None:
    items = load(docs_folder, name="handbook")

    assert sorted(items) == [
        "guides/faq.html",
        "guides/onboarding.md",
        "notes.txt",
        "policy.docx",
        "report.pdf",
    ]
    assert all(isinstance(item, Document) and item.source == "handbook" for item in items.values())
    titles = {external_id: document(items, external_id).title for external_id in items}
    assert titles == {
        "guides/faq.html": "FAQ",
        "guides/onboarding.md": "Onboarding",
        "notes.txt": "notes",
        "policy.docx": "Remote Policy",
        "report.pdf": "Q3 Report",
    }
    assert "Quarterly revenue grew." in document(items, "report.pdf").text
    assert "Remote work is allowed" in document(items, "policy.docx").text
    assert "descaling" in document(items, "notes.txt").text


def test_metadata_describes_the_file(docs_folder: Path) -> None:
    notes = docs_folder / "notes.txt"
    os.utime(notes, (1_700_000_000, 1_700_000_000))

    item = document(load(docs_folder), "notes.txt")

    assert item.metadata == {
        "path": "notes.txt",
        "extension": ".txt",
        "size": notes.stat().st_size,
    }
    assert item.updated_at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    hash_before = item.content_hash
    os.utime(notes, (1_800_000_000, 1_800_000_000))
    assert document(load(docs_folder), "notes.txt").content_hash == hash_before  # touching is not a change
    assert item.acl_groups == ["public"]


def test_html_drops_scripts_styles_navigation_and_footer(tmp_path: Path) -> None:
    (tmp_path / "page.htm").write_text(
        "<html><head><title> Benefits &amp; Perks </title><style>p { color: red }</style></head>"
        "<body><nav><a href='/'>Home</a> <a href='/hr'>HR portal</a></nav><script>trackVisitor()</script>"
        "<h1>Dental</h1><p>Covered <b>fully</b>.</p><footer>Copyright Intranet Team</footer></body></html>",
        encoding="utf-8",
    )

    page = document(load(tmp_path), "page.htm")

    assert page.title == "Benefits & Perks"
    assert "Dental" in page.text and "fully" in page.text
    assert "trackVisitor" not in page.text and "color" not in page.text
    assert "HR portal" not in page.text and "Copyright" not in page.text  # site navigation and footer


def test_html_without_a_title_element_is_named_by_its_first_h1(tmp_path: Path) -> None:
    (tmp_path / "fragment.html").write_text("<h1>Parking <em>rules</em></h1><p>Free after six.</p>", encoding="utf-8")
    (tmp_path / "bare.html").write_text("<p>Free after six.</p>", encoding="utf-8")

    items = load(tmp_path)

    assert document(items, "fragment.html").title == "Parking rules"
    assert document(items, "bare.html").title == "bare"


def test_docx_keeps_tables_in_order(tmp_path: Path, make_docx: Callable[..., Path]) -> None:
    make_docx(tmp_path / "rates.docx", ["Mileage rates:"], table=[["Car", "0.30"], ["Bike", "0.10"]])

    rates = document(load(tmp_path), "rates.docx")

    assert rates.title == "rates"
    assert rates.text.splitlines() == ["Mileage rates:", "Car | 0.30", "Bike | 0.10"]


def test_pptx_slides_tables_groups_and_notes_are_read_in_order(tmp_path: Path) -> None:
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    deck.core_properties.title = "PowerPoint Presentation"  # what PowerPoint leaves: not a title
    first = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    first.shapes.title.text = "Q3 results"
    first.placeholders[1].text_frame.text = "Revenue grew 12%"
    first.notes_slide.notes_text_frame.text = "Mention the new office."
    second = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    table = second.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(1)).table
    for (row, column), value in {(0, 0): "Region", (0, 1): "Sales", (1, 0): "North", (1, 1): "40"}.items():
        table.cell(row, column).text = value
    group = second.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(3), Inches(2), Inches(1)).text_frame.text = "Grouped caption"
    deck.save(str(tmp_path / "review.pptx"))

    review = document(load(tmp_path), "review.pptx")

    assert review.title == "Q3 results"  # the first slide's title
    assert review.text.splitlines() == [
        "Q3 results",
        "Revenue grew 12%",
        "Mention the new office.",
        "Region | Sales",
        "North | 40",
        "Grouped caption",
    ]


def test_csv_rows_keep_quoted_fields_whole(tmp_path: Path) -> None:
    (tmp_path / "contacts.csv").write_text(
        'team,lead,note\nPayroll,Ann,"closes on the 25th, not the 30th"\n\nIT,Bob,"ask first\nthen file a ticket"\n',
        encoding="utf-8",
    )
    (tmp_path / "semicolons.csv").write_text("city;office\nLyon;Part-Dieu\n", encoding="utf-8")

    items = load(tmp_path)

    assert document(items, "contacts.csv").text.splitlines() == [
        "team | lead | note",
        "Payroll | Ann | closes on the 25th, not the 30th",
        "IT | Bob | ask first",
        "then file a ticket",
    ]
    assert document(items, "semicolons.csv").text == "city | office\nLyon | Part-Dieu"


def test_xlsx_sheets_are_read_as_rows_of_values(tmp_path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    rates = book.active
    rates.title = "Rates"
    rates.append(["Vehicle", "Rate per km"])
    rates.append(["Car", 0.3])
    rates.append([None, None])
    rates.append(["Bike", "=0.05*2"])  # a formula never computed by Excel: no cached value, so left out
    book.create_sheet("Notes").append(["Rates change in January."])
    book.properties.title = "Mileage"
    book.save(str(tmp_path / "mileage.xlsx"))

    mileage = document(load(tmp_path), "mileage.xlsx")

    assert mileage.title == "Mileage"
    assert mileage.text.splitlines() == [
        "Rates",
        "Vehicle | Rate per km",
        "Car | 0.3",
        "Bike",
        "Notes",
        "Rates change in January.",
    ]


def test_docx_without_a_title_is_named_by_the_heading_it_opens_with(tmp_path: Path) -> None:
    import docx

    opens = docx.Document()
    opens.add_heading("Expense policy", level=1)
    opens.add_paragraph("Claims within 30 days.")
    opens.save(str(tmp_path / "opens.docx"))
    later = docx.Document()
    later.add_paragraph("Claims within 30 days.")
    later.add_heading("Hotels", level=1)  # a section, not the document
    later.save(str(tmp_path / "later.docx"))

    items = load(tmp_path)

    assert document(items, "opens.docx").title == "Expense policy"
    assert document(items, "later.docx").title == "later"


def test_markdown_title_is_the_heading_the_document_opens_with(tmp_path: Path) -> None:
    files = {
        "section.md": "Intro line\n\n## Travel ##\n\n# Later\n",  # a heading after text names a section
        "plain.md": "No heading here.\n",
        "level2.md": "\n## Expenses ##\n\nHow to claim.\n",
        "readme.md": '<p align="center"><img src="logo.png"></p>\n\n[![CI](https://ci/badge.svg)](https://ci)\n\n'
        "# Python bindings for [`llama.cpp`](https://github.com/ggml-org/llama.cpp) <img src=x>\n\nText.\n",
        "html_h1.md": '<div align="center"><h1>Vega-Altair</h1></div>\n\n## Install\n',
        "tagline.md": '<p align="center"><em>Fast to code</em></p>\n\n# Later\n',
        "setext.md": "<!-- generated\nfrom a template -->\ngRPC Python\n===========\n\nPackage for gRPC.\n",
        "rst.md": "======\nkombu\n======\n\nMessaging.\n",
        "fenced.md": "```bash\n# install it first\npip install x\n```\n\nThen run it.\n",
        "front.md": '---\nlayout: page\ntitle: "Leave policy"\n---\n# Leave\n\nDays off.\n',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")

    items = load(tmp_path)

    assert {name: document(items, name).title for name in files} == {
        "section.md": "section",
        "plain.md": "plain",
        "level2.md": "Expenses",
        "readme.md": "Python bindings for llama.cpp",
        "html_h1.md": "Vega-Altair",
        "tagline.md": "tagline",
        "setext.md": "gRPC Python",
        "rst.md": "kombu",
        "fenced.md": "fenced",
        "front.md": "Leave policy",
    }


def test_markdown_is_indexed_as_the_words_a_reader_sees(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text(
        "---\nlayout: page\n---\n"
        "# Expenses\n\n"
        '<p align="center"><a href="https://ci"><img src="badge.svg"></a> <em>Claims &amp; refunds</em></p>\n\n'
        "Send the [claim form](https://intranet/forms/claim.pdf) to *finance*\nwithin `30` days.\n"
        "![diagram](flow.png)\n\n"
        "| Item | Limit |\n|---|---|\n| Hotel | 150 |\n\n"
        "- taxis\n- trains\n\n"
        "```\nclaim --submit\n```\n",
        encoding="utf-8",
    )

    guide = document(load(tmp_path), "guide.md")

    assert guide.text.splitlines() == [
        "Expenses",
        "Claims & refunds",
        "Send the claim form to finance within 30 days.",
        "Item | Limit",
        "Hotel | 150",
        "taxis",
        "trains",
        "claim --submit",
    ]


def test_a_pdf_title_left_by_a_converter_is_read_as_a_reader_would(
    tmp_path: Path, make_pdf: Callable[..., bytes]
) -> None:
    titles = {
        "word.pdf": "Microsoft Word - Travel policy 2024.docx",
        "blank.pdf": "Untitled-1",
        "slides.pdf": "PowerPoint Presentation",
        "real.pdf": "Security  handbook",
    }
    for name, title in titles.items():
        (tmp_path / name).write_bytes(make_pdf(["Some text."], title=title))

    items = load(tmp_path)

    assert {name: document(items, name).title for name in titles} == {
        "word.pdf": "Travel policy 2024",
        "blank.pdf": "blank",  # no title: the file name
        "slides.pdf": "slides",
        "real.pdf": "Security handbook",
    }


def test_non_utf8_text_is_kept(tmp_path: Path) -> None:
    (tmp_path / "legacy.txt").write_bytes("Caf\u00e9 menu".encode("cp1252"))

    assert document(load(tmp_path), "legacy.txt").text == "Caf\u00e9 menu"


def test_bad_files_are_skipped_with_their_reason(tmp_path: Path, make_pdf: Callable[..., bytes]) -> None:
    (tmp_path / "binary.txt").write_bytes(b"MZ\x00\x00\x90")
    (tmp_path / "blank.md").write_text("  \n\t\n", encoding="utf-8")
    (tmp_path / "big.txt").write_text("x" * 1001, encoding="utf-8")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    (tmp_path / "Makefile").write_text("all:\n", encoding="utf-8")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf")
    (tmp_path / "scan.pdf").write_bytes(make_pdf([]))
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "broken.pptx").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "broken.xlsx").write_bytes(b"not a workbook")
    (tmp_path / "good.txt").write_text("fine", encoding="utf-8")

    items = load(tmp_path, max_file_bytes=1000)

    assert "binary" in skip_reason(items, "binary.txt")
    assert "no text to index" in skip_reason(items, "blank.md")
    assert "1,001 bytes, over the limit of 1,000; raise FERRET_MAX_FILE_BYTES" in skip_reason(items, "big.txt")
    assert "unsupported file type '.jpg'" in skip_reason(items, "photo.jpg")
    assert "unsupported file type '(none)'" in skip_reason(items, "Makefile")
    assert "corrupt or unreadable PDF" in skip_reason(items, "broken.pdf")
    assert "OCR" in skip_reason(items, "scan.pdf")
    assert "corrupt or unreadable DOCX" in skip_reason(items, "broken.docx")
    assert "corrupt or unreadable PPTX" in skip_reason(items, "broken.pptx")
    assert "corrupt or unreadable XLSX" in skip_reason(items, "broken.xlsx")
    assert isinstance(items["good.txt"], Document)


def test_missing_office_extra_is_a_skip_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_pdf: Callable[..., bytes]
) -> None:
    (tmp_path / "report.pdf").write_bytes(make_pdf(["text"]))
    (tmp_path / "letter.docx").write_bytes(b"irrelevant")
    monkeypatch.setitem(sys.modules, "pypdf", None)
    monkeypatch.setitem(sys.modules, "docx", None)
    for name, module in (("deck.pptx", "pptx"), ("sheet.xlsx", "openpyxl")):
        (tmp_path / name).write_bytes(b"irrelevant")
        monkeypatch.setitem(sys.modules, module, None)

    items = load(tmp_path)

    assert skip_reason(items, "report.pdf") == "install ferret[office] to read .pdf files"
    assert skip_reason(items, "letter.docx") == "install ferret[office] to read .docx files"
    assert skip_reason(items, "deck.pptx") == "install ferret[office] to read .pptx files"
    assert skip_reason(items, "sheet.xlsx") == "install ferret[office] to read .xlsx files"


def test_docx_title_style_is_the_title_when_the_property_is_empty(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_paragraph("Expense Policy", style="Title")
    document.add_paragraph("Receipts are kept for ten years.")
    document.save(str(tmp_path / "expenses.docx"))

    assert document_title(load(tmp_path), "expenses.docx") == "Expense Policy"


def document_title(items: dict[str, Document | SkippedItem], external_id: str) -> str:
    return document(items, external_id).title
