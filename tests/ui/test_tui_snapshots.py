"""Screens of the terminal client at 80×24, compared with the SVG snapshots in ``__snapshots__`` (regenerate after a
deliberate change with ``pytest tests/ui/test_tui_snapshots.py --snapshot-update`` and look at the report).

The data is real: the populated embedded store, searched by the real MiniLM, so a change in ranking shows here too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytest_textual_snapshot", reason="snapshot tests need pytest-textual-snapshot (dev extra)")

from textual.pilot import Pilot
from textual.widgets import Input

from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.search_client import LocalSearchClient

SIZE = (80, 24)


def typed(text: str, *keys: str) -> Callable[[Pilot[None]], Any]:
    """A ``run_before`` that types ``text``, waits for the debounced search, then presses ``keys``."""

    async def run(pilot: Pilot[None]) -> None:
        pilot.app.query_one(Input).cursor_blink = False  # a blinking cursor would make the snapshot flaky
        await pilot.pause()
        await pilot.press(*text)
        await pilot.pause(0.4)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()

    return run


def test_results_screen(populated_home: Path, snap_compare: Any) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    assert snap_compare(app, terminal_size=SIZE, run_before=typed("capital of France"))


def test_document_screen(populated_home: Path, snap_compare: Any) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    assert snap_compare(app, terminal_size=SIZE, run_before=typed("gas giant", "down", "enter"))


def test_help_screen(populated_home: Path, snap_compare: Any) -> None:
    app = FerretSearchApp(LocalSearchClient(), corpus="kb")
    assert snap_compare(app, terminal_size=SIZE, run_before=typed("", "f1"))
