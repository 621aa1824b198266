"""How ``ferret search`` prints a result: the passage around the query's words, marked, every line indented."""

from __future__ import annotations

import pytest
from rich.console import Console

from ferret.cli import render
from ferret.core.search.searcher import SearchResult

LONG = (
    "Annual leave is booked in the HR portal at least two weeks ahead, and your manager approves it there. "
    "Unused days carry over until the end of March. Parental leave is separate: twenty weeks at full pay for "
    "either parent, taken in up to three blocks before the child turns two, announced eight weeks ahead."
)


def test_a_result_shows_the_passage_around_the_query_words_indented(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(width=60, record=True, force_terminal=True, color_system="standard")
    monkeypatch.setattr(render, "console", console)
    result = SearchResult(1, "policies/leave.md", "Leave", LONG, 0.91, 7, "handbook")

    render.print_results("parental blocks", [result])

    lines = console.export_text(clear=False).splitlines()
    assert lines[:2] == ["parental blocks", "   1. Leave  0.9100  handbook: policies/leave.md"]
    snippet = lines[2:]
    assert len(snippet) > 1 and all(line.startswith("      ") and line == line.rstrip() for line in snippet)
    assert all(len(line) <= 60 for line in snippet)
    # The window starts shortly before the first query word, not at the passage's first sentence.
    assert snippet[0].startswith("      …") and "Parental" in " ".join(snippet)
    styled = console.export_text(styles=True)
    assert "\x1b[1mParental\x1b[0m" in styled and "\x1b[1mblocks\x1b[0m" in styled  # the query's words in bold


def test_a_title_in_brackets_is_printed_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Titles and ids are text: "[draft] plan" read as rich markup lost its "[draft]" (or raised on a stray tag)."""
    console = Console(width=80, record=True)
    monkeypatch.setattr(render, "console", console)
    result = SearchResult(1, "[/x]", "[draft] [bold]plan", "The plan.", 0.5, 7, "wiki")

    render.print_results("plan", [result])

    assert console.export_text().splitlines()[1] == "   1. [draft] [bold]plan  0.5000  wiki: [/x]"
