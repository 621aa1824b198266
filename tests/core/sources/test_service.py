"""Configured sources end to end on real SQLite databases (Ferret's and a source table read by the sql connector):
the CLI's add/sync/list/runs/remove with secret references, refused empty listings, the schedule, and principals
expanded through reported group memberships."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.connectors.registry import build_connector
from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import Document, Source, SyncRun, SyncState
from ferret.core.db.source import close_orphaned_sync_runs, expand_principals, replace_group_members, sync_runs
from ferret.core.db.synthetic import run_owner
from ferret.core.errors import ConflictError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.settings import FerretSettings
from ferret.core.sources.config import parse_spec
from ferret.core.sources.schedule import sync_due
from ferret.core.sources.service import add_source, due_sources, sync_source
from ferret.core.sources.sync import SyncFailedError

runner = CliRunner()


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    """A source database: two articles, one for the support team."""
    path = tmp_path / "kb.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, title TEXT, body TEXT, teams TEXT)")
        connection.executemany(
            "INSERT INTO articles VALUES (?, ?, ?, ?)",
            [(1, "Refunds", "Refunds take five days.", "support"), (2, "Holidays", "The office closes in August.", "")],
        )
    return path


def definition(tmp_path: Path, schedule: int | None = None) -> Path:
    spec: dict[str, Any] = {
        "corpus": "help",
        "name": "kb",
        "kind": "sql",
        "config": {
            "url": {"env": "KB_URL"},
            "table": "articles",
            "title_column": "title",
            "text_columns": ["body"],
            "acl_column": "teams",
        },
    }
    if schedule:
        spec["schedule_minutes"] = schedule
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_cli_adds_syncs_lists_and_removes_a_source(
    ferret_home: Path, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    added = runner.invoke(app, ["source", "add", str(definition(tmp_path, schedule=30))])
    assert added.exit_code == 0 and "every 30 min" in added.output, added.output

    scheduled = runner.invoke(app, ["source", "scheduler", "--once"])  # never synced: due now
    assert scheduled.exit_code == 0, scheduled.output
    assert "kb: sync 1 succeeded: new 2, changed 0" in scheduled.output
    idle = runner.invoke(app, ["source", "scheduler", "--once"]).output  # synced just now: not due
    assert "kb:" not in idle and "no source is due" in idle  # it said nothing at all

    synced = runner.invoke(app, ["source", "sync", "help", "kb", "--json"])
    assert synced.exit_code == 0, synced.output
    report = json.loads(synced.stdout)
    assert report["state"] == "succeeded" and report["trigger"] == "manual"
    with sqlite3.connect(ferret_home / "ferret.db") as connection:  # a job row (issue 11, item 10)
        jobs = connection.execute("SELECT kind, state, result FROM jobs").fetchall()
    assert [(kind, state, json.loads(result)["sync_run"]) for kind, state, result in jobs] == [
        ("source_sync", "succeeded", report["id"])
    ]
    assert (report["counts"]["new"], report["counts"]["unchanged"], report["counts"]["deleted"]) == (0, 2, 0)

    history = runner.invoke(app, ["source", "runs", "help", "kb"], env={"COLUMNS": "250"}).output.splitlines()
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, manual: sync 2 succeeded: new 0", history[0]), history
    assert re.match(r"^\d{4}-.* UTC, schedule: sync 1 succeeded: new 2", history[1]), history

    listed = runner.invoke(app, ["source", "list", "--json"])
    assert json.loads(listed.output)[0]["last_sync"]["counts"]["unchanged"] == 2
    again = runner.invoke(app, ["source", "add", str(definition(tmp_path))])
    assert again.exit_code != 0 and "pass --replace" in again.output
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        (stored,) = connection.execute("SELECT config FROM sources WHERE name = 'kb'").fetchone()
    assert json.loads(stored)["url"] == {"env": "KB_URL"} and str(kb) not in stored  # the reference, never the value

    unconfirmed = runner.invoke(app, ["source", "remove", "help", "kb"])  # no terminal to ask: refused
    assert unconfirmed.exit_code == 1 and "add --yes to confirm" in " ".join(unconfirmed.output.split())
    assert len(json.loads(runner.invoke(app, ["source", "list", "--json"]).output)) == 1
    removed = runner.invoke(app, ["source", "remove", "help", "kb", "--yes"])
    assert removed.exit_code == 0 and "its 2 documents" in removed.output
    assert json.loads(runner.invoke(app, ["source", "list", "--json"]).output) == []


def test_a_source_listing_nothing_deletes_nothing(
    session: Session, settings: FerretSettings, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    source = add_source(session, parse_spec(json.loads(definition(tmp_path).read_text())), build_connector)
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        assert sync_source(session, settings, backend, build_connector, source).state == SyncState.SUCCEEDED
        with sqlite3.connect(kb) as connection:
            connection.execute("DELETE FROM articles")  # an emptied table looks like an outage, not a wipe

        with pytest.raises(SyncFailedError, match=r"listed no documents while 2 are indexed.*nothing was deleted"):
            sync_source(session, settings, backend, build_connector, source)
    finally:
        backend.close()
    assert len(list(session.scalars(select(Document)))) == 2
    principals = {row.external_id: row.acl_groups for row in session.scalars(select(Document))}
    assert principals == {"1": ["kb:group:support"], "2": ["public"]}


def test_a_full_sync_reads_what_the_checkpoint_skips(
    ferret_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade that changes how documents are read, a sync from the checkpoint never sees the documents the
    source did not touch; ``--full`` reads them all again and re-embeds only those that changed."""
    path = tmp_path / "dated.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE articles (id INTEGER PRIMARY KEY, title TEXT, body TEXT, updated TEXT)")
        rows = [
            (1, "Refunds", "Refunds take five days.", "2020-01-01T00:00:00"),
            (2, "Holidays", "August.", "2024-01-01"),
        ]
        connection.executemany("INSERT INTO articles VALUES (?, ?, ?, ?)", rows)
    monkeypatch.setenv("KB_URL", f"sqlite:///{path}")
    spec = json.loads(definition(tmp_path).read_text())
    spec["config"] = {**spec["config"], "updated_column": "updated", "acl_column": None}
    (tmp_path / "dated.json").write_text(json.dumps(spec), encoding="utf-8")
    assert runner.invoke(app, ["source", "add", str(tmp_path / "dated.json")]).exit_code == 0
    assert runner.invoke(app, ["source", "sync", "help", "kb"]).exit_code == 0
    with sqlite3.connect(path) as connection:  # as if the reader changed: new text, the row's time untouched
        connection.execute("UPDATE articles SET body = 'Refunds take three days.' WHERE id = 1")

    def sync(*flags: str) -> dict[str, int]:
        done = runner.invoke(app, ["source", "sync", "help", "kb", "--json", *flags])
        assert done.exit_code == 0, done.output
        counts: dict[str, int] = json.loads(done.stdout)["counts"]
        return counts

    assert sync()["changed"] == 0  # the checkpoint's watermark is past the row's time
    full = sync("--full")
    assert (full["changed"], full["unchanged"], full["deleted"]) == (1, 1, 0)
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        (body,) = connection.execute("SELECT body FROM documents WHERE external_id = '1'").fetchone()
    assert "three days" in body


def test_scheduled_sources_fall_due_after_their_period(
    session: Session, settings: FerretSettings, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    source = add_source(session, parse_spec(json.loads(definition(tmp_path, schedule=30).read_text())), build_connector)
    assert due_sources(session) == [source]  # never synced
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        ((name, run),) = sync_due(session, settings, backend, build_connector)
        assert name == "kb" and not isinstance(run, str)
        assert (run.trigger, run.state, run.counts["new"]) == ("schedule", SyncState.SUCCEEDED, 2)
        assert sync_due(session, settings, backend, build_connector) == []  # synced just now: not due
    finally:
        backend.close()
    now = datetime.now(UTC)
    assert due_sources(session, now + timedelta(minutes=29)) == []
    assert due_sources(session, now + timedelta(minutes=31)) == [source]
    source.enabled = False
    assert due_sources(session, now + timedelta(minutes=31)) == []


def test_principals_expand_through_reported_memberships(session: Session) -> None:
    corpus = create_corpus(session, "help")
    source = Source(corpus_id=corpus.id, name="wiki", kind="confluence", config={})
    session.add(source)
    session.flush()
    changed = replace_group_members(
        session,
        source,
        [
            ("wiki:group:eng", "user:ann@x.org"),
            ("wiki:group:staff", "wiki:group:eng"),
            ("wiki:group:ops", "user:bob@x.org"),
        ],
    )
    assert changed == 3

    assert expand_principals(session, ["user:ann@x.org"]) == ["user:ann@x.org", "wiki:group:eng", "wiki:group:staff"]
    assert expand_principals(session, ["user:eve@x.org"]) == ["user:eve@x.org"]
    assert replace_group_members(session, source, [("wiki:group:ops", "user:bob@x.org")]) == 2
    assert expand_principals(session, ["user:ann@x.org"]) == ["user:ann@x.org"]


def test_a_source_pointed_at_another_table_reads_all_of_it(
    ferret_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``source add --replace`` with another table (bucket, share, site): the old checkpoint's watermark is no
    position in the new data, so the next sync reads everything instead of only rows newer than the old ones."""
    path = tmp_path / "two.sqlite"
    with sqlite3.connect(path) as connection:
        for table in ("current", "archive"):
            connection.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, title TEXT, body TEXT, updated TEXT)")
        connection.execute("INSERT INTO current VALUES (1, 'Refunds', 'Refunds take five days.', '2026-01-01')")
        connection.execute("INSERT INTO archive VALUES (7, 'Memo', 'The 2019 merger memo.', '2019-05-01')")
    monkeypatch.setenv("KB_URL", f"sqlite:///{path}")
    spec = json.loads(definition(tmp_path).read_text())
    spec["config"] = {**spec["config"], "table": "current", "updated_column": "updated", "acl_column": None}
    (tmp_path / "two.json").write_text(json.dumps(spec), encoding="utf-8")
    assert runner.invoke(app, ["source", "add", str(tmp_path / "two.json")]).exit_code == 0
    assert runner.invoke(app, ["source", "sync", "help", "kb"]).exit_code == 0

    spec["config"]["table"] = "archive"
    (tmp_path / "two.json").write_text(json.dumps(spec), encoding="utf-8")
    assert runner.invoke(app, ["source", "add", str(tmp_path / "two.json"), "--replace"]).exit_code == 0
    done = runner.invoke(app, ["source", "sync", "help", "kb", "--json"])
    assert done.exit_code == 0, done.output
    counts = json.loads(done.stdout)["counts"]
    assert (counts["new"], counts["deleted"]) == (1, 1)
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        assert connection.execute("SELECT external_id FROM documents").fetchall() == [("7",)]

    def checkpoint() -> str | None:
        with sqlite3.connect(ferret_home / "ferret.db") as connection:
            (stored,) = connection.execute("SELECT checkpoint FROM sources WHERE name = 'kb'").fetchone()
        return str(stored) if stored is not None else None

    kept = checkpoint()
    assert kept is not None and "2019-05-01" in kept
    spec["schedule_minutes"] = 60  # not the config: the checkpoint stays
    (tmp_path / "two.json").write_text(json.dumps(spec), encoding="utf-8")
    assert runner.invoke(app, ["source", "add", str(tmp_path / "two.json"), "--replace"]).exit_code == 0
    assert checkpoint() == kept


def test_the_list_names_each_source_s_corpus_and_documents_and_a_failure_in_full(
    ferret_home: Path, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two corpora with a source of the same name are told apart; a sync's error is printed whole, not cut to the
    first words of its sentence in a table cell; a sync into a corpus with no index says how to make it searchable."""
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    spec = json.loads(definition(tmp_path).read_text())
    added = runner.invoke(app, ["source", "add", str(definition(tmp_path))])
    assert added.exit_code == 0 and "--group kb:group:<name>`" in " ".join(added.output.split())
    synced = runner.invoke(app, ["source", "sync", "help", "kb"])
    assert synced.exit_code == 0 and "next: `ferret index build --corpus help --promote`" in synced.output
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**spec, "corpus": "legal", "config": {**spec["config"], "table": "gone"}}))
    assert runner.invoke(app, ["source", "add", str(other), "--no-check"]).exit_code == 0  # the check would refuse
    assert runner.invoke(app, ["source", "sync", "legal", "kb"]).exit_code == 1

    listed = json.loads(runner.invoke(app, ["source", "list", "--json"]).output)
    assert [(row["corpus"], row["name"], row["documents"]) for row in listed] == [("help", "kb", 2), ("legal", "kb", 0)]
    table = runner.invoke(app, ["source", "list"])
    assert table.exit_code == 0, table.output
    assert "help" in table.output and "legal" in table.output
    error = " ".join(table.output.split())
    assert "legal/kb: Sync of source 'kb' failed" in error and "no such table: gone" in error


def test_a_connector_s_own_sentence_is_the_sync_s_reason_without_a_class_name(
    session: Session, settings: FerretSettings, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    spec = json.loads(definition(tmp_path).read_text())
    spec["config"]["updated_column"] = "body"  # text, not a timestamp: the connector says so in a sentence
    source = add_source(session, parse_spec(spec), build_connector)
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with pytest.raises(SyncFailedError) as failed:
            sync_source(session, settings, backend, build_connector, source)
    finally:
        backend.close()
    assert str(failed.value).startswith(
        "Sync of source 'kb' failed: Column 'body' holds 'Refunds take five days.', which is not an ISO timestamp; "
        "updated_column must be a timestamp, ISO text or epoch seconds; what was checkpointed is kept"
    )


def test_a_killed_sync_does_not_hold_its_source_back_and_a_live_one_is_not_run_twice(
    session: Session, settings: FerretSettings, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync killed with kill -9 left its run "running": the scheduler skipped the source for six hours. And a
    manual sync started while another was going closed that one as interrupted and raced it on the checkpoint."""
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    source = add_source(session, parse_spec(json.loads(definition(tmp_path, schedule=30).read_text())), build_connector)
    host = socket.gethostname()
    started = datetime.now(UTC) - timedelta(hours=1)
    killed = SyncRun(source_id=source.id, trigger="manual", counts={}, skipped=[], owner=f"{host}:999999999:1")
    killed.started_at = started
    session.add(killed)
    session.commit()
    assert due_sources(session) == [source]
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        run = sync_source(session, settings, backend, build_connector, source, trigger="schedule")
        assert run.state == SyncState.SUCCEEDED
        assert killed.state == SyncState.FAILED and killed.error is not None and "killed" in killed.error

        going = SyncRun(source_id=source.id, trigger="api", counts={}, skipped=[], owner=run_owner())
        session.add(going)
        session.commit()
        runs_before = len(sync_runs(session, source))
        assert due_sources(session, datetime.now(UTC) + timedelta(hours=1)) == []  # its process is this one: alive
        with pytest.raises(
            ConflictError, match=rf"^Source 'kb' is already syncing \(sync run {going.id}, started .* by api\)"
        ):
            sync_source(session, settings, backend, build_connector, source)
        assert len(sync_runs(session, source)) == runs_before and going.state == SyncState.RUNNING
    finally:
        backend.close()

    going.owner = f"another-host:{run_owner().partition(':')[2]}"  # a worker's: presumed alive for six hours
    session.commit()
    assert due_sources(session, datetime.now(UTC) + timedelta(hours=1)) == []
    assert due_sources(session, datetime.now(UTC) + timedelta(hours=7)) == [source]
    going.owner = f"{host}:999999999:1"
    session.commit()
    assert close_orphaned_sync_runs(session) == [going.id] and going.state == SyncState.FAILED


def test_cli_add_refuses_a_source_it_cannot_read_and_stores_it_with_no_check(
    ferret_home: Path, tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The access check runs before anything is written: a refused add leaves no corpus and no source, and a refused
    --replace keeps the stored definition; --no-check stores what the check would refuse."""
    monkeypatch.setenv("KB_URL", f"sqlite:///{kb}")
    spec = json.loads(definition(tmp_path).read_text())
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**spec, "config": {**spec["config"], "text_columns": ["bodies"]}}), encoding="utf-8")

    refused = runner.invoke(app, ["source", "add", str(wrong)], env={"COLUMNS": "250"})
    assert refused.exit_code == 1
    sentence = " ".join(refused.output.split())
    assert (
        "SQL source could not read columns bodies, id, teams, title of table articles at {env: KB_URL} (no such "
        "column: articles.bodies); check table, db_schema and the column names; nothing was stored (`--no-check` "
        "stores the source without this check)." in sentence
    ), sentence
    assert str(kb) not in sentence and "Traceback" not in refused.output
    assert json.loads(runner.invoke(app, ["source", "list", "--json"]).output) == []
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        assert connection.execute("SELECT count(*) FROM corpora").fetchone() == (0,)

    added = runner.invoke(app, ["source", "add", str(definition(tmp_path))])
    assert added.exit_code == 0 and "access checked, synced on demand" in added.output, added.output
    again = runner.invoke(app, ["source", "add", str(wrong), "--replace"])
    assert again.exit_code == 1 and "no such column: articles.bodies" in again.output
    listed = json.loads(runner.invoke(app, ["source", "list", "--json"]).output)
    assert len(listed) == 1

    unchecked = runner.invoke(app, ["source", "add", str(wrong), "--replace", "--no-check"])
    assert unchecked.exit_code == 0 and "access not checked (--no-check)" in unchecked.output, unchecked.output
    with sqlite3.connect(ferret_home / "ferret.db") as connection:
        (stored,) = connection.execute("SELECT config FROM sources WHERE name = 'kb'").fetchone()
    assert json.loads(stored)["text_columns"] == ["bodies"]
    assert "--no-check" in " ".join(runner.invoke(app, ["source", "add", "--help"]).output.split())
