"""Turn the bytes of one file into a title and plain text, one parser per format.

Each parser raises ``UnreadableFileError`` with a reason a user can act on; the connector turns that into a
``SkippedItem`` so that one bad file never stops an ingest. The office parsers (pypdf, python-docx,
python-pptx, openpyxl) are imported only when such a file is met, so a text-only install needs none of them.
"""

from __future__ import annotations

import codecs
import csv
import importlib
import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from ferret.connectors.filesystem.markdown import to_text

# Not text a reader searches for: code, and a saved page's site navigation and footer, which would otherwise repeat
# in a passage of every page of a site.
_NON_CONTENT_TAGS = ["script", "style", "noscript", "template", "svg", "nav", "footer"]


class UnreadableFileError(Exception):
    """A file that cannot be turned into text; ``str(error)`` is the reason shown in the ingest report."""


@dataclass(frozen=True)
class ParsedFile:
    """What a parser found: the title the format declares ("" when none) and the plain text."""

    title: str
    text: str


def decode_text(data: bytes) -> str:
    """Decode a text file, refusing binaries: a NUL byte never occurs in real UTF-8 or single-byte text."""
    for bom, encoding in ((codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    if b"\x00" in data:
        raise UnreadableFileError("binary file (contains NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Not UTF-8: most likely a legacy Windows file; keep its text rather than drop it.
        return data.decode("cp1252", errors="replace")


def parse_plain_text(data: bytes) -> ParsedFile:
    return ParsedFile(title="", text=decode_text(data))


def parse_csv(data: bytes) -> ParsedFile:
    """Rows as "cell | cell" lines, quoted fields (commas, line breaks) kept whole, as a spreadsheet's rows are."""
    text = decode_text(data)
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel  # one column, or too irregular to tell: commas
    rows = csv.reader(io.StringIO(text), dialect)
    return ParsedFile(title="", text="\n".join(" | ".join(cells) for row in rows if (cells := _nonblank(row))))


def parse_markdown(data: bytes) -> ParsedFile:
    """The words a reader sees (link targets, images and tags dropped) and the heading the document opens with
    (``ferret.connectors.filesystem.markdown``)."""
    markdown = to_text(decode_text(data))
    return ParsedFile(title=markdown.title, text=markdown.text)


def parse_html(data: bytes) -> ParsedFile:
    """Visible body text only, without scripts, styles, the site navigation and the footer; the title is the
    <title>, else the first <h1>."""
    tree = LexborHTMLParser(decode_text(data))
    title = ""
    for selector in ("title", "h1"):  # a saved fragment or a hand-written page often has no <title>
        node = tree.css_first(selector)
        if node is not None and (title := " ".join(node.text(separator=" ").split())):
            break
    tree.strip_tags(_NON_CONTENT_TAGS)
    body = tree.body
    text = body.text(separator="\n", strip=True) if body is not None else ""
    return ParsedFile(title=title, text=text)


def _office_module(name: str, extension: str) -> Any:
    """An office format's reader, imported when such a file is met; the skip reason names the extra when missing."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise UnreadableFileError(f"install ferret[office] to read {extension} files") from None


def parse_pdf(data: bytes) -> ParsedFile:
    pypdf = _office_module("pypdf", ".pdf")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableFileError("PDF is password-protected; remove the password to index it")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or ""
    except UnreadableFileError:
        raise
    except Exception as error:  # pypdf raises many exception types on malformed files
        raise UnreadableFileError(f"corrupt or unreadable PDF ({type(error).__name__}: {error})") from error
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    return ParsedFile(title=declared_title(str(title)), text=text)


# What converters and office applications write into a Title when the author never set one: the source file's name
# after the program's, or a placeholder. "Microsoft Word - Q3 report.docx" means "Q3 report"; "Untitled" or "Slide 1"
# means no title.
_CONVERTER_PREFIX = re.compile(r"^Microsoft (?:Word|PowerPoint|Excel) - ", re.IGNORECASE)
_SOURCE_EXTENSION = re.compile(r"\.(?:docx?|pptx?|xlsx?|odt|rtf|txt|html?|indd|tex)$", re.IGNORECASE)
_PLACEHOLDER = re.compile(
    r"^(?:untitled(?:[ -]?\d+)?|document\d*|presentation\d*|powerpoint presentation|slide \d+|title|"
    r"microsoft word|no title|none|\(?anonymous\)?)$",
    re.IGNORECASE,
)


def declared_title(declared: str) -> str:
    """An office file's declared Title as a reader would name the document, "" when it is a converter's or an
    application's placeholder."""
    title = _SOURCE_EXTENSION.sub("", _CONVERTER_PREFIX.sub("", " ".join(declared.split())))
    return "" if _PLACEHOLDER.match(title) else title


def parse_docx(data: bytes) -> ParsedFile:
    """Paragraphs and tables in document order; a table row becomes one line of cells joined by " | "; the title is
    the Title property, the first paragraph in the "Title" style, or the "Heading 1" the document opens with."""
    docx = _office_module("docx", ".docx")
    table_type = _office_module("docx.table", ".docx").Table
    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        styled_title = opening_heading = ""
        for block in document.iter_inner_content():
            if isinstance(block, table_type):
                blocks.extend(_table_lines(block))
            elif block.text.strip():
                style = block.style.name if block.style is not None else ""
                if not blocks and style == "Heading 1":
                    opening_heading = block.text
                blocks.append(block.text)
                if not styled_title and style == "Title":
                    styled_title = block.text
        # The document's Title property, else its first paragraph in Word's "Title" style (what a reader sees as
        # the title: most documents never fill the property in), else the Heading 1 it opens with (as in Markdown).
        title = declared_title(document.core_properties.title or "") or styled_title or opening_heading
    except Exception as error:  # python-docx raises zipfile, KeyError, lxml errors on malformed files
        raise UnreadableFileError(f"corrupt or unreadable DOCX ({type(error).__name__}: {error})") from error
    return ParsedFile(title=title.strip(), text="\n".join(blocks))


def parse_pptx(data: bytes) -> ParsedFile:
    """Each slide's text in order: its text boxes (groups included), tables as "cell | cell" rows, then its speaker
    notes; the title is the Title property, else the first slide's title."""
    pptx = _office_module("pptx", ".pptx")
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        lines: list[str] = []
        first_title = ""
        for slide in deck.slides:
            heading = slide.shapes.title
            if not first_title and heading is not None and heading.has_text_frame:
                first_title = " ".join(heading.text_frame.text.split())
            for shape in slide.shapes:
                lines.extend(_shape_lines(shape))
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                lines.extend(_nonblank(slide.notes_slide.notes_text_frame.text.splitlines()))
        title = declared_title(deck.core_properties.title or "") or first_title
    except Exception as error:  # python-pptx raises zipfile, KeyError, lxml errors on malformed files
        raise UnreadableFileError(f"corrupt or unreadable PPTX ({type(error).__name__}: {error})") from error
    return ParsedFile(title=title, text="\n".join(lines))


def _shape_lines(shape: Any) -> list[str]:
    if getattr(shape, "shapes", None) is not None:  # a group: its members in order
        return [line for member in shape.shapes for line in _shape_lines(member)]
    if getattr(shape, "has_table", False):
        return _table_lines(shape.table)
    if getattr(shape, "has_text_frame", False):
        return _nonblank(paragraph.text for paragraph in shape.text_frame.paragraphs)
    return []


def parse_xlsx(data: bytes) -> ParsedFile:
    """Each sheet's name, then its non-empty rows as "cell | cell" lines (a formula as its last computed value); the
    title is the Title property."""
    openpyxl = _office_module("openpyxl", ".xlsx")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            lines: list[str] = []
            for sheet in book.worksheets:
                lines.append(sheet.title)
                for row in sheet.iter_rows(values_only=True):
                    if cells := _nonblank("" if value is None else str(value) for value in row):
                        lines.append(" | ".join(cells))
            title = declared_title(book.properties.title or "")
        finally:
            book.close()
    except Exception as error:  # openpyxl raises zipfile, KeyError, lxml errors on malformed files
        raise UnreadableFileError(f"corrupt or unreadable XLSX ({type(error).__name__}: {error})") from error
    return ParsedFile(title=title, text="\n".join(lines))


def _nonblank(texts: Iterable[str]) -> list[str]:
    return [text.strip() for text in texts if text.strip()]


def _table_lines(table: Any) -> list[str]:
    lines = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            value = cell.text.strip()
            # A merged cell appears once per grid column it spans; keep it once.
            if value and (not cells or cells[-1] != value):
                cells.append(value)
        if cells:
            lines.append(" | ".join(cells))
    return lines


PARSERS: dict[str, Callable[[bytes], ParsedFile]] = {
    ".txt": parse_plain_text,
    ".rst": parse_plain_text,
    ".csv": parse_csv,
    ".md": parse_markdown,
    ".html": parse_html,
    ".htm": parse_html,
    ".pdf": parse_pdf,
    ".docx": parse_docx,
    ".pptx": parse_pptx,
    ".xlsx": parse_xlsx,
}
SUPPORTED_EXTENSIONS = frozenset(PARSERS)


def parse_file(data: bytes, extension: str) -> ParsedFile:
    """Parse ``data`` by its lower-case dotted extension; ``UnreadableFileError`` says why it failed."""
    parser = PARSERS.get(extension)
    if parser is None:
        raise UnreadableFileError(unsupported_reason(extension))
    return parser(data)


def unsupported_reason(extension: str) -> str:
    known = ", ".join(sorted(SUPPORTED_EXTENSIONS))
    return f"unsupported file type '{extension or '(none)'}'; Ferret reads {known}"
