"""``ferret search --group``: a source's groups carry its name (``kb:group:support``), so a bare ``--group support``
matches public documents only; the CLI then names the full group in one hint line on stderr."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.encoder.dual_encoder import DualEncoder

runner = CliRunner()


def test_a_bare_group_that_only_a_source_holds_gets_a_hint_naming_its_full_name(
    ferret_home: Path, encoder: DualEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = tmp_path / "kb.sqlite"
    with sqlite3.connect(kb) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, body TEXT, teams TEXT)")
        connection.executemany(
            "INSERT INTO articles VALUES (?, ?, ?)",
            [(1, "Refunds reach the card within five working days.", "support"), (2, "Lunch is at noon.", "")],
        )
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    config = {"url": {"env": "KB_URL"}, "table": "articles", "text_columns": ["body"], "acl_column": "teams"}
    definition = tmp_path / "kb.json"
    definition.write_text(json.dumps({"corpus": "help", "name": "kb", "kind": "sql", "config": config}))
    for command in (
        ["source", "add", str(definition)],
        ["source", "sync", "help", "kb"],
        ["index", "build", "--corpus", "help", "--promote"],
    ):
        done = runner.invoke(app, command)
        assert done.exit_code == 0, done.output

    def search(group: str, *extra: str) -> tuple[str, str]:
        done = runner.invoke(app, ["search", "refunds card working days", "--corpus", "help", "--group", group, *extra])
        assert done.exit_code == 0, done.output
        return done.stdout, " ".join(done.stderr.split())

    found, hint = search("support")
    assert "Refunds" not in found  # public documents only
    assert hint == (
        "hint: no document or membership names group 'support', so it matched public documents only; a source's "
        "groups carry its name: --group kb:group:support"
    )
    assert "kb:group:support" in search("support", "--json")[1]  # stderr: the JSON on stdout stays parseable
    found, hint = search("kb:group:support")
    assert "Refunds" in found and hint == ""
    assert search("finance")[1] == ""  # held by no source either: nothing to suggest
    assert search("public")[1] == ""  # stored as given
