"""A folder (a local disk or a mounted share) as a scheduled source, through the CLI: added with its ``acl`` map,
synced incrementally, its permissions edited without a re-read, a file moved in with an old modification time."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ferret.cli.main import app

runner = CliRunner()


def write_definition(path: Path, root: Path, acl: dict[str, list[str]]) -> Path:
    spec: dict[str, Any] = {"corpus": "handbook", "name": "share", "kind": "filesystem", "config": {"root": str(root)}}
    spec["config"]["acl"] = acl
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def stored_groups(home: Path) -> dict[str, list[str]]:
    with sqlite3.connect(home / "ferret.db") as connection:
        rows = connection.execute("SELECT external_id, acl_groups FROM documents").fetchall()
    return {external_id: json.loads(groups) for external_id, groups in rows}


def sync_counts() -> dict[str, int]:
    synced = runner.invoke(app, ["source", "sync", "handbook", "share", "--json"])
    assert synced.exit_code == 0, synced.output
    report = json.loads(synced.stdout)
    assert report["state"] == "succeeded", report
    return dict(report["counts"])


def test_a_folder_is_a_scheduled_source_with_groups_from_its_acl_map(ferret_home: Path, tmp_path: Path) -> None:
    root = tmp_path / "share"
    (root / "hr").mkdir(parents=True)
    (root / "hr" / "leave.md").write_text("# Leave\n\nTwenty days of annual leave.\n", encoding="utf-8")
    (root / "office.md").write_text("# Office\n\nThe office opens at nine.\n", encoding="utf-8")
    definition = write_definition(tmp_path / "share.json", root, {"hr/*": ["hr"]})

    added = runner.invoke(app, ["source", "add", str(definition)])
    assert added.exit_code == 0, added.output
    assert "--group <name>`" in added.output  # the acl map's groups as written, not share:group:<name>
    counts = sync_counts()
    assert (counts["new"], counts["changed"], counts["deleted"]) == (2, 0, 0)
    assert stored_groups(ferret_home) == {"hr/leave.md": ["hr"], "office.md": ["public"]}

    outside = tmp_path / "outside.md"
    outside.write_text("# Travel\n\nBook trains, not planes.\n", encoding="utf-8")
    os.utime(outside, (1_000_000, 1_000_000))  # copied with its old modification time (cp -p, rsync -t)
    outside.rename(root / "travel.md")
    (root / "office.md").unlink()
    counts = sync_counts()
    assert (counts["new"], counts["deleted"]) == (1, 1)  # found by the rename's status-change time; pruned
    assert set(stored_groups(ferret_home)) == {"hr/leave.md", "travel.md"}

    edited = write_definition(definition, root, {"hr/*": ["hr", "managers"], "travel.md": ["staff"]})
    replaced = runner.invoke(app, ["source", "add", str(edited), "--replace"])
    assert replaced.exit_code == 0, replaced.output
    counts = sync_counts()
    assert (counts["new"], counts["changed"], counts["passages_embedded"]) == (0, 0, 0)
    assert counts["permission_updates"] == 2  # the acl edit reached both documents without a re-read
    assert stored_groups(ferret_home) == {"hr/leave.md": ["hr", "managers"], "travel.md": ["staff"]}


def test_a_missing_folder_is_refused_when_added_and_nothing_is_stored(ferret_home: Path, tmp_path: Path) -> None:
    definition = write_definition(tmp_path / "share.json", tmp_path / "not-mounted", {})

    added = runner.invoke(app, ["source", "add", str(definition)], env={"COLUMNS": "400"})  # one line: no wrap

    assert added.exit_code == 1
    assert "not-mounted does not exist; point 'root' at an existing folder" in added.output
    assert json.loads(runner.invoke(app, ["source", "list", "--json"]).output) == []
