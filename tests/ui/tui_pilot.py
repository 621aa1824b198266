"""What the terminal client's tests share: the terminal size its screens are tested at, waiting for the searches a
keystroke started, and the status line as text."""

from __future__ import annotations

from textual.pilot import Pilot
from textual.widgets import Static

from ferret.ui.tui.app import FerretSearchApp

SIZE = (80, 24)
"""A default SSH terminal."""


async def settle(pilot: Pilot[None]) -> None:
    """Let the debounce timer fire and every search worker finish."""
    await pilot.pause(0.4)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def status(app: FerretSearchApp) -> str:
    return str(app.query_one("#status", Static).render())
