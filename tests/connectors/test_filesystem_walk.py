"""The filesystem connector's walk of a folder: what it leaves out and why, links, pipes, paths too long, the
poll window, the listing that prunes, the acl map, and its incremental sync's cursor. Parsing each format is
``test_filesystem.py``."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connectors.folder_items import document, load, skip_reason
from ferret.connectors.filesystem import FilesystemConnector
from ferret.core.errors import InvalidInputError
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, IncompleteListingError
from ferret_testing import unlistable_folder


def test_too_long_path_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path
    for _ in range(6):
        folder = folder / ("d" * 200)
    folder.mkdir(parents=True)
    (folder / "deep.txt").write_text("deep", encoding="utf-8")

    (item,) = load(tmp_path).values()

    assert isinstance(item, SkippedItem)
    assert len(item.external_id) == 1024
    assert item.reason.startswith("path is longer than 1024 characters")


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    locked = tmp_path / "locked.txt"
    locked.write_text("secret", encoding="utf-8")
    locked.chmod(0)

    items = load(tmp_path)

    assert skip_reason(items, "dangling.txt").startswith("cannot read file: No such file")
    if os.geteuid() != 0:  # root reads any file
        assert skip_reason(items, "locked.txt") == "cannot read file: Permission denied"


def test_a_named_pipe_is_left_out_instead_of_read_for_ever(tmp_path: Path) -> None:
    """Reading a FIFO with no writer blocks: the ingest hung on one until this check."""
    (tmp_path / "notes.md").write_text("# Notes\n\nThe VPN needs the new client.", encoding="utf-8")
    os.mkfifo(tmp_path / "pipe.md")
    (tmp_path / "link-to-pipe.txt").symlink_to(tmp_path / "pipe.md")

    found: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: found.update(items=load(tmp_path)), daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():  # a regression: fail, and do not hang the suite on the open pipe
        with open(tmp_path / "pipe.md", "w"):  # a writer lets the blocked open return
            pass
        pytest.fail("The connector opened a named pipe and waited for a writer.")
    items = found["items"]  # returned: nothing opened the pipe

    assert skip_reason(items, "pipe.md") == "not a regular file (a pipe, socket or device), left out"
    assert skip_reason(items, "link-to-pipe.txt") == "not a regular file (a pipe, socket or device), left out"
    assert [external_id for external_id, item in items.items() if isinstance(item, Document)] == ["notes.md"]
    assert list(FilesystemConnector(root=str(tmp_path)).list_external_ids()) == ["notes.md"]


def test_hidden_entries_are_left_out_and_include_filters(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD.txt").write_text("ref", encoding="utf-8")
    (tmp_path / ".env.txt").write_text("KEY=1", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("a", encoding="utf-8")
    (tmp_path / "b.txt").write_text("b", encoding="utf-8")

    items = load(tmp_path)
    assert sorted(key for key, item in items.items() if isinstance(item, Document)) == ["b.txt", "sub/a.md"]
    # Reported, not left out silently (issue 11, item 13); a hidden folder once, not each file inside it.
    assert skip_reason(items, ".git/") == "hidden folder (leading dot), left out with its contents"
    assert skip_reason(items, ".env.txt") == "hidden file (leading dot), left out"
    assert len(items) == 4
    assert list(FilesystemConnector(root=tmp_path).list_external_ids()) == ["b.txt", "sub/a.md"]
    assert sorted(load(tmp_path, include=["*.md"])) == ["sub/a.md"]


def test_symbolic_links_are_indexed_once(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (root / "real" / "policy.txt").write_text("Travel is booked through the portal.", encoding="utf-8")
    (outside / "shared.txt").write_text("Shared drive notes.", encoding="utf-8")
    (root / "link-to-policy.txt").symlink_to(root / "real" / "policy.txt")
    (root / "link-to-folder").symlink_to(root / "real", target_is_directory=True)
    (root / "link-outside.txt").symlink_to(outside / "shared.txt")

    items = load(root)

    assert sorted(key for key, item in items.items() if isinstance(item, Document)) == [
        "link-outside.txt",  # its target is not under root: read once, through the link
        "real/policy.txt",
    ]
    assert skip_reason(items, "link-to-policy.txt") == (
        "symbolic link to real/policy.txt, which is indexed under its own path"
    )
    assert skip_reason(items, "link-to-folder/") == "symbolic link to a folder, not followed"


def test_poll_returns_files_changed_in_the_window_moved_in_ones_too(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    for name in ["old.txt", "edge.txt"]:
        (root / name).write_text(name, encoding="utf-8")
    first = datetime.now(UTC)
    time.sleep(0.02)
    (root / "new.txt").write_text("new", encoding="utf-8")
    (elsewhere / "moved.txt").write_text("moved", encoding="utf-8")
    os.utime(elsewhere / "moved.txt", (1_000, 1_000))  # an old modification time, as `cp -p` or `rsync -t` keep
    time.sleep(0.02)
    second = datetime.now(UTC)
    time.sleep(0.02)
    (elsewhere / "moved.txt").rename(root / "moved.txt")  # the rename sets its status-change time
    connector = FilesystemConnector(root=root)

    def polled(start: datetime | None, end: datetime) -> list[str]:
        return sorted(item.external_id for item in connector.poll_source(start, end))

    now = datetime.now(UTC)
    assert polled(None, first) == ["edge.txt", "old.txt"]
    assert polled(first, second) == ["new.txt"]
    assert polled(second, now) == ["moved.txt"]  # by its modification time alone it would be in no window
    assert polled(first.replace(tzinfo=None), now.replace(tzinfo=None)) == ["moved.txt", "new.txt"]


def test_list_external_ids_lists_supported_files_without_parsing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    (tmp_path / "broken.pdf").write_bytes(b"not a pdf")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.HTML").write_text("<p>b</p>", encoding="utf-8")

    assert list(FilesystemConnector(root=tmp_path).list_external_ids()) == ["a.txt", "broken.pdf", "d/b.HTML"]


def test_acl_first_matching_glob_wins(tmp_path: Path) -> None:
    (tmp_path / "hr" / "payroll").mkdir(parents=True)
    (tmp_path / "hr" / "payroll" / "march.txt").write_text("salaries", encoding="utf-8")
    (tmp_path / "hr" / "holidays.txt").write_text("holidays", encoding="utf-8")
    (tmp_path / "menu.txt").write_text("menu", encoding="utf-8")
    acl = {"hr/payroll/*": ["finance"], "hr/*": ["hr", "managers"]}
    connector = FilesystemConnector(root=tmp_path, acl=acl)

    assert connector.acl_groups("hr/payroll/march.txt") == ["finance"]
    assert connector.acl_groups("hr/holidays.txt") == ["hr", "managers"]
    assert connector.acl_groups("menu.txt") == ["public"]
    assert document(load(tmp_path, acl=acl), "hr/holidays.txt").acl_groups == ["hr", "managers"]


def test_bad_root_is_one_clear_sentence(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x", encoding="utf-8")

    with pytest.raises(InvalidInputError, match="does not exist; point 'root' at an existing folder"):
        FilesystemConnector(root=tmp_path / "missing")
    with pytest.raises(InvalidInputError, match="is not a folder"):
        FilesystemConnector(root=file)
    with pytest.raises(InvalidInputError, match="root: Field required"):
        FilesystemConnector()
    with pytest.raises(InvalidInputError, match="roots: Extra inputs are not permitted"):
        FilesystemConnector(root=tmp_path, roots=tmp_path)
    with pytest.raises(InvalidInputError, match="max_file_bytes"):
        FilesystemConnector(root=tmp_path, max_file_bytes=0)


def test_a_sync_reads_what_changed_since_the_last_start_and_a_folder_it_cannot_list_keeps_the_watermark(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "a.md").write_text("# A\n\nAlpha.", encoding="utf-8")
    (tmp_path / "notes" / "b.md").write_text("# B\n\nBravo.", encoding="utf-8")
    connector = FilesystemConnector(root=tmp_path, overlap_seconds=0)

    def run(cursor: Any) -> tuple[list[str], Any]:
        items = list(connector.sync(cursor))
        marks = [item.cursor for item in items if isinstance(item, CursorMark)]
        return [item.external_id for item in items if isinstance(item, Document | SkippedItem)], marks[-1]

    read, cursor = run(None)
    assert read == ["a.md", "notes/b.md"] and cursor["after"] is None
    time.sleep(0.02)
    assert run(cursor)[0] == []  # nothing changed since that sync started

    (tmp_path / "c.md").write_text("# C\n\nCharlie.", encoding="utf-8")
    unlistable_folder(tmp_path / "notes")
    read, after_failure = run(cursor)
    assert read[0] == "c.md" and read[1].startswith("notes/d") and len(read) == 2  # the new file, the folder missed
    assert after_failure["since"] == cursor["since"]  # the next sync looks at that folder's files again
    with pytest.raises(IncompleteListingError, match="cannot be listed"):
        list(connector.list_external_ids())  # so nothing is pruned from the partial walk
