"""Progress when output is no terminal (issue 11, item 8): plain lines at a steady interval, not 7 silent minutes."""

from __future__ import annotations

import time

import pytest

from ferret.cli.render import PROGRESS_INTERVAL_ENV, PlainLineProgress, progress_bar


def test_without_a_terminal_progress_is_plain_lines_at_a_steady_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "0.05")
    bar = progress_bar()
    assert isinstance(bar, PlainLineProgress)  # pytest captures stderr: no terminal
    with bar:
        task = bar.add_task("embedding docs", total=10)
        bar.update(task, completed=4)
        time.sleep(0.5)  # nothing moves, the lines keep coming
        bar.update(task, completed=10)
        fraction = bar.add_task("training", total=1.0)
        bar.update(fraction, completed=0.25)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("] embedding docs: started") and lines[0].startswith("[")
    assert sum(line.endswith("embedding docs: 4/10 (40%)") for line in lines) >= 3
    assert sum(line.endswith("embedding docs: 10/10 (100%)") for line in lines) == 1  # a finished task: once
    assert lines[-1].endswith("training: 25%")
    assert all("\x1b[" not in line for line in lines)  # no terminal control codes in a log
