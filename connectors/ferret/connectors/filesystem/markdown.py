"""Markdown to the words a reader sees, and the title a reader sees (the filesystem, git, SMB, S3 and SharePoint
connectors all read ``.md`` files through here).

The text is indexed and shown, so link targets, badge images and HTML tags would cost every passage wordpieces
and put URL fragments into BM25 and into the snippets users read: ``[docs](https://x/y)`` becomes ``docs``,
images are dropped, HTML blocks keep their text, a table row becomes its cells joined by `` | `` (as in .docx),
code blocks keep their code. Haystack's ``MarkdownToDocument`` converts Markdown to text the same way.

The title is front matter's ``title:``, else the heading the document opens with (after any logo or badge), else
"" (the connector then uses the file name). A heading after the first paragraph names a section, not the
document; since the title is embedded with every passage, "Installation" or "Sponsors" would mislead all of them.

Example:
    >>> to_text("# Ferret [docs](https://x)\\n\\nSearch *your* files.")
    MarkdownText(title='Ferret docs', text='Ferret docs\\nSearch your files.')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markdown_it import MarkdownIt
from selectolax.lexbor import LexborHTMLParser

if TYPE_CHECKING:
    from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
# A reST title's overline ("=====" above the title) that Markdown reads into a setext heading's text.
_OVERLINE = re.compile(r"^(?:([=\-~^*+#])\1{2,}\s+)+")
_FRONT_MATTER_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class MarkdownText:
    title: str
    text: str


def to_text(markdown: str) -> MarkdownText:
    """Plain text, one line per paragraph, heading, list item or table row, and the document's title."""
    front_title, body = _split_front_matter(markdown)
    lines: list[str] = []
    title: str | None = None  # decided at the first block with words: a heading, or "" for anything else
    heading = False
    row: list[str] = []
    in_row = False
    for token in _PARSER.parse(body):
        if token.type == "heading_open":
            heading = True
        elif token.type == "heading_close":
            heading = False
        elif token.type == "tr_open":
            in_row, row = True, []
        elif token.type == "tr_close":
            in_row = False
            if any(row):
                lines.append(" | ".join(cell for cell in row if cell))
                title = "" if title is None else title
        elif token.type == "inline":
            words = _inline_text(token.children or [])
            if in_row:
                row.append(words)
            elif words:
                lines.append(words)
                if title is None:
                    title = _OVERLINE.sub("", words) if heading else ""
        elif token.type in ("fence", "code_block"):
            if code := token.content.strip("\n"):
                lines.append(code)
                title = "" if title is None else title
        elif token.type == "html_block":
            # Logos and badges (no words) leave the title undecided; an <h1> is the title; other words are text.
            words, h1 = _html_text(token.content)
            if words:
                lines.append(words)
                title = h1 if title is None else title
    return MarkdownText(title=front_title or title or "", text="\n".join(lines))


def _split_front_matter(markdown: str) -> tuple[str, str]:
    """YAML front matter is metadata, not text: its ``title:`` and the body after it."""
    front = _FRONT_MATTER.match(markdown)
    if front is None:
        return "", markdown
    declared = _FRONT_MATTER_TITLE.search(front.group(1))
    title = " ".join(declared.group(1).strip("\"'").split()) if declared else ""
    return title, markdown[front.end() :]


def _inline_text(children: list[Token]) -> str:
    parts: list[str] = []
    for child in children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        # images (badges, logos), inline HTML tags and link markup carry no words of their own
    return " ".join("".join(parts).split())


def _html_text(html: str) -> tuple[str, str]:
    """The words of an HTML block, and those of its first ``<h1>`` ("" when none)."""
    tree = LexborHTMLParser(html)
    h1 = tree.css_first("h1")
    body = tree.body
    words = " ".join(body.text(separator=" ").split()) if body is not None else ""
    return words, " ".join(h1.text(separator=" ").split()) if h1 is not None else ""
