"""One ``--promote`` form (issue 11, item 12): ``index build`` and ``pipeline run`` both take the ``--promote/
--no-promote`` flag; the pipeline adds ``--force-promote``, and its old ``--promote auto|force|never`` still works
with a one-line deprecation notice."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from ferret.cli.main import app, modern_spelling


def parsed(args: list[str]) -> dict[str, Any]:
    """The parameters click parses for ``args`` (a command path, then its options), without running the command."""
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    while hasattr(command, "get_command"):  # a group (typer vendors its own click)
        name = args[len(path)]
        command = command.get_command(None, name)
        path.append(name)
    return dict(command.make_context(" ".join(path), args[len(path) :]).params)


def test_both_commands_take_the_same_flag() -> None:
    assert parsed(["index", "build", "--corpus", "c", "--promote"])["promote"] is True
    assert parsed(["index", "build", "--corpus", "c", "--no-promote"])["promote"] is False
    assert parsed(["pipeline", "run", "--task", "t", "--promote"])["promote"] is True
    assert parsed(["pipeline", "run", "--task", "t", "--no-promote"])["promote"] is False
    default = parsed(["pipeline", "run", "--task", "t"])
    assert default["promote"] is True and default["force_promote"] is False  # the guard decides, as before


@pytest.mark.parametrize(
    ("old", "promote", "force"), [("auto", True, False), ("force", True, True), ("never", False, False)]
)
def test_the_old_spelling_still_works_with_a_notice(
    old: str, promote: bool, force: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    for spelling in (["--promote", old], [f"--promote={old}"]):
        args = modern_spelling(["pipeline", "run", *spelling, "--task", "t"])

        params = parsed(args)
        assert (params["promote"], params["force_promote"], params["task"]) == (promote, force, "t")
        notice = capsys.readouterr().err.strip()
        assert notice.startswith(f"`--promote {old}` is deprecated") and "\n" not in notice


def test_other_arguments_are_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (
        ["pipeline", "run", "--promote", "--task", "t"],
        ["index", "build", "--corpus", "never", "--promote"],
        ["search", "--promote", "force"],
    ):
        assert modern_spelling(args) == args
    assert capsys.readouterr().err == ""
