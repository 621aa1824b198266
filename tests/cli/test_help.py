"""Every option of ``ferret search`` says what it is for (issue 11, item 12: ``--corpus`` had no help)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ferret.cli.main import app


def test_search_help_describes_corpus_and_the_acl_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, ["search", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Corpus to search (its active index version)." in text
    assert "--all-groups" in text and "As `public` only, unless --group or --all-groups is given" in text


def test_choices_are_told_apart_without_typers_type_descriptor() -> None:
    """Typer before 0.29 (the GPU machine's image has one) has no ``type_descriptor``: the CLI read it and crashed."""
    from types import SimpleNamespace

    from ferret.cli.group import _is_choice

    class Choice:  # what Click (or Typer's copy of it) calls a choice type
        pass

    assert _is_choice(SimpleNamespace(type=Choice()))
    assert not _is_choice(SimpleNamespace(type=str))
    assert _is_choice(SimpleNamespace(type_descriptor=SimpleNamespace(is_choice=True), type=str))
