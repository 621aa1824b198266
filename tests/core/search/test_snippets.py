"""What every front end shows of a result (``ferret.core.search.snippets``): the query's words and the window."""

from __future__ import annotations

from ferret.core.search.snippets import highlight_spans, query_terms, snippet_window, terms_pattern

LONG = (
    "Annual leave is booked in the HR portal at least two weeks ahead. Unused days carry over until the end of "
    "March. Parental leave is separate: twenty weeks at full pay for either parent, taken in blocks."
)


def test_the_window_starts_shortly_before_the_first_query_word_and_cuts_at_words() -> None:
    window = snippet_window(LONG, "parental pay", width=80)

    assert window.startswith("…") and window.endswith("…") and "Parental leave" in window
    assert len(window) <= 82  # the width and the two ellipses
    assert LONG.find(window[1:-1].split()[0]) > 0  # a whole word of the text, after its start
    assert snippet_window(LONG, "quarterly", width=80) == LONG[:80].rsplit(" ", 1)[0] + "…"  # no query word: the start
    assert snippet_window("Short text.", "text", width=80) == "Short text."


def test_query_words_are_marked_whole_and_stop_words_are_not() -> None:
    assert query_terms("What is the capital of France?") == ["capital", "france"]
    pattern = terms_pattern("parent leave")
    assert pattern is not None
    assert [m.group(0) for m in pattern.finditer(LONG)] == ["leave", "Parental", "leave", "parent"]
    assert terms_pattern("what is the") is None


def test_highlight_spans_are_the_marked_words_offsets() -> None:
    spans = highlight_spans(LONG, "parent leave")

    assert [LONG[start:end] for start, end in spans] == ["leave", "Parental", "leave", "parent"]
    assert spans == sorted(spans)
    assert highlight_spans(LONG, "what is the") == []
