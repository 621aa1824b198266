"""The SMB connector against a real Samba smbd on 127.0.0.1 (tests/connectors/servers/samba.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.servers.samba import CRAWLER_PASSWORD, READER, READER_PASSWORD, SambaServer, samba_missing
from connectors.source_add import added, refused
from ferret.connectors.smb.acl import Ace, flatten_share_and_file, readers
from ferret.connectors.smb.connector import SmbConnector
from ferret.core.acl import PUBLIC_GROUP
from ferret.core.errors import InvalidInputError
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, IncompleteListingError
from ferret_testing import free_port, skip_or_fail

GROUPS = ["ferret-smb-hr", "ferret-smb-eng"]
ROOT = "files:group:S-1-22-1-0"
"""The files' owner (root, unmapped): Samba grants the owner read in every DACL it derives from a POSIX mode."""


@pytest.fixture
def samba(tmp_path: Path) -> Iterator[SambaServer]:
    missing = samba_missing()
    if missing:
        skip_or_fail(missing, "`make system-deps` installs samba; run the tests as root")
    server = SambaServer(tmp_path / "samba", free_port()).start(GROUPS)
    yield server
    server.stop()


def connect(samba: SambaServer, **extra: Any) -> SmbConnector:
    config: dict[str, Any] = {
        "name": "files",
        "sid_groups": {samba.group_sid("ferret-smb-hr"): "hr"},
        "overlap_seconds": 0,
        **extra,
    }
    return SmbConnector(**samba.connector_config(**config))


def run(connector: SmbConnector, cursor: Any = None) -> tuple[list[Document | SkippedItem], Any]:
    items: list[Document | SkippedItem] = []
    last = None
    for item in connector.sync(cursor):
        if isinstance(item, CursorMark):
            last = item.cursor
        else:
            assert isinstance(item, Document | SkippedItem)
            items.append(item)
    return items, last


def documents(items: list[Document | SkippedItem]) -> dict[str, Document]:
    return {item.external_id: item for item in items if isinstance(item, Document)}


def seed(samba: SambaServer) -> None:
    samba.write("handbook.md", "# Handbook\n\nLunch is at noon.\n")
    samba.write("hr/salaries.txt", "Salary bands for 2026.", group="ferret-smb-hr", mode=0o640)
    samba.write("eng/design.txt", "The queue is sharded by tenant.", group="ferret-smb-eng", mode=0o640)
    samba.write("eng/logo.png", "not really a png")


def test_full_sync_reads_files_with_their_dacl_as_principals(samba: SambaServer) -> None:
    seed(samba)
    connector = connect(samba)

    items, cursor = run(connector)

    docs = documents(items)
    assert set(docs) == {"handbook.md", "hr/salaries.txt", "eng/design.txt"}
    assert docs["handbook.md"].acl_groups == [PUBLIC_GROUP]
    assert docs["hr/salaries.txt"].acl_groups == [ROOT, "files:group:hr"]
    assert docs["hr/salaries.txt"].text == "Salary bands for 2026."
    assert docs["handbook.md"].title == "Handbook"
    # an unmapped SID stays a group nobody belongs to: never public, never dropped
    assert docs["eng/design.txt"].acl_groups == [ROOT, f"files:group:{samba.group_sid('ferret-smb-eng')}"]
    skipped = [item for item in items if isinstance(item, SkippedItem)]
    assert [item.external_id for item in skipped] == ["eng/logo.png"]
    assert cursor["after"] is None and cursor["since"] > 0
    assert sorted(connector.list_external_ids()) == sorted(docs)
    connector.close()


def test_no_change_resync_delivers_nothing_then_edits_and_permission_changes_are_picked_up(samba: SambaServer) -> None:
    seed(samba)
    connector = connect(samba)
    first, cursor = run(connector)
    before = documents(first)

    unchanged, cursor = run(connector, cursor)
    assert documents(unchanged) == {}

    time.sleep(0.05)
    samba.write("handbook.md", "# Handbook\n\nLunch is at one.\n")
    samba.permit("eng/design.txt", "ferret-smb-hr", 0o640)  # content and LastWriteTime unchanged
    changed, cursor = run(connector, cursor)

    assert set(documents(changed)) == {"handbook.md"}  # Samba's ChangeTime is its LastWriteTime
    assert "one" in documents(changed)["handbook.md"].text
    assert documents(run(connector, cursor)[0]) == {}
    permissions = dict(connector.iter_permissions())
    assert permissions["eng/design.txt"] == [ROOT, "files:group:hr"]
    assert permissions == {
        **{key: doc.acl_groups for key, doc in before.items()},
        "eng/design.txt": permissions["eng/design.txt"],
    }


def test_a_moved_file_is_delivered_under_its_new_path_and_the_listing_drops_the_old(samba: SambaServer) -> None:
    seed(samba)
    connector = connect(samba)
    _, cursor = run(connector)
    time.sleep(0.05)
    (samba.share_dir / "handbook.md").rename(samba.share_dir / "eng" / "handbook.md")  # keeps its LastWriteTime
    (samba.share_dir / "hr" / "salaries.txt").unlink()

    moved = documents(run(connector, cursor)[0])

    assert set(moved) == {"eng/handbook.md", "eng/design.txt"}  # the whole destination folder comes again
    assert sorted(connector.list_external_ids()) == ["eng/design.txt", "eng/handbook.md"]


def test_interrupted_sync_resumes_after_the_last_mark_without_losing_a_file(samba: SambaServer) -> None:
    for index in range(6):
        samba.write(f"{'ab'[index % 2]}/{index}.txt", f"note {index}")
    samba.write("c.txt", "top level note")
    connector = connect(samba)
    everything = set(documents(run(connector)[0]))

    delivered: list[str] = []
    mark = None
    for item in connector.sync(None):
        if isinstance(item, CursorMark):
            mark = item.cursor
        elif isinstance(item, Document):
            delivered.append(item.external_id)
            if len(delivered) == 3:
                break  # killed mid-way; the engine persisted the last mark

    rest, final = run(connector, mark)
    resumed = [item.external_id for item in rest if isinstance(item, Document)]
    assert mark is not None and mark["after"] == delivered[-2]  # the mark follows each finished file
    assert set(delivered) | set(resumed) == everything
    assert len(resumed) == len(everything) - 2  # the third file had no mark yet: delivered again, nothing else
    assert final["after"] is None


def test_share_acl_and_file_dacl_are_flattened(samba: SambaServer) -> None:
    seed(samba)
    hr_sid = samba.group_sid("ferret-smb-hr")
    connector = connect(samba, share_allow=[hr_sid])

    docs = documents(run(connector)[0])

    assert docs["handbook.md"].acl_groups == ["files:group:hr"]  # public file on an HR-only share
    assert docs["hr/salaries.txt"].acl_groups == ["files:group:hr"]
    assert docs["eng/design.txt"].acl_groups == []  # share and file name no common principal: nobody


def test_oversized_file_is_skipped_with_a_reason(samba: SambaServer) -> None:
    samba.write("big.txt", "x" * 2000)
    items, _ = run(connect(samba, max_file_bytes=1000))

    assert len(items) == 1 and isinstance(items[0], SkippedItem)
    assert "max_file_bytes" in items[0].reason


def test_unlistable_folder_is_skipped_in_a_sync_and_stops_the_deletion_listing(samba: SambaServer) -> None:
    seed(samba)
    (samba.share_dir / "hr").chmod(0o700)  # root only: the ordinary account cannot list it
    connector = SmbConnector(
        **samba.connector_config(username=READER, password=READER_PASSWORD, overlap_seconds=0, name="files")
    )

    items, cursor = run(connector)

    assert "hr" in {item.external_id for item in items if isinstance(item, SkippedItem)}
    assert "handbook.md" in documents(items)
    assert cursor["since"] is None  # the next sync walks everything again
    with pytest.raises(IncompleteListingError):
        list(connector.list_external_ids())


def test_wrong_password_and_bad_config_are_one_sentence_errors(samba: SambaServer) -> None:
    connector = SmbConnector(**samba.connector_config(password="wrong"))
    with pytest.raises(InvalidInputError, match="Cannot list SMB folder"):
        list(connector.list_external_ids())
    with pytest.raises(InvalidInputError, match=r"Invalid smb connector config.*share"):
        SmbConnector(host="h", share="a/b", username="u", password="p")
    assert "password" not in connect(samba).config_json()


def test_dacl_evaluation() -> None:
    read, full = 0x120089, 0x1F01FF
    everyone, hr, bob = "S-1-1-0", "S-1-5-21-1-2-3-1104", "S-1-5-21-1-2-3-1105"

    assert readers(None) == {everyone}  # no DACL at all: everyone
    assert readers([]) == set()  # an empty DACL: nobody
    assert readers([Ace(True, hr, read), Ace(True, bob, 0x2)]) == {hr}  # write-only is not read
    assert readers([Ace(False, bob, read), Ace(True, bob, full), Ace(True, hr, read)]) == {hr}
    assert readers([Ace(False, everyone, read), Ace(True, hr, read)]) == set()
    assert readers([Ace(True, hr, read, flags=0x08 | 0x02)]) == set()  # inherit-only: children only
    assert readers([Ace(True, hr, 0x80000000)]) == {hr}  # GENERIC_READ
    assert flatten_share_and_file(None, {"a"}) == ["a"]
    assert flatten_share_and_file(None, {"a", PUBLIC_GROUP}) == [PUBLIC_GROUP]
    assert flatten_share_and_file({PUBLIC_GROUP}, {"a"}) == ["a"]
    assert flatten_share_and_file({"a", "b"}, {PUBLIC_GROUP}) == ["a", "b"]
    assert flatten_share_and_file({"a", "b"}, {"b", "c"}) == ["b"]


def smb_source(samba: SambaServer, **extra: Any) -> dict[str, Any]:
    """The crawler's config with its password as a secret reference, as a definition file states it."""
    return {**samba.connector_config(**extra), "password": {"env": "SMB_PASSWORD"}}


def test_source_add_checks_the_logon_and_the_folder_before_storing(
    samba: SambaServer, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    samba.write("policies/leave.txt", "Leave is booked in the portal.")
    monkeypatch.setenv("SMB_PASSWORD", CRAWLER_PASSWORD)
    assert added(session, "smb", smb_source(samba, path="policies")).config["path"] == "policies"


def test_source_add_refuses_a_wrong_password_a_missing_share_folder_and_a_denied_folder(
    samba: SambaServer, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    samba.write("hr/salaries.txt", "Salaries are reviewed in March.", group=None, mode=0o600)
    samba.permit("hr", None, 0o700)  # root's folder: the ordinary account may not list it
    monkeypatch.setenv("SMB_PASSWORD", CRAWLER_PASSWORD)
    refused(
        session,
        "smb",
        smb_source(samba, path="missing"),
        r"^Cannot list SMB folder \\\\127\.0\.0\.1\\docs\\missing \(STATUS_OBJECT_NAME_NOT_FOUND\): the folder does "
        r"not exist; check path; nothing was stored",
    )
    refused(session, "smb", smb_source(samba, share="nosuch"), r"\(STATUS_NOT_FOUND\): the share does not exist")
    monkeypatch.setenv("SMB_PASSWORD", READER_PASSWORD)
    refused(
        session,
        "smb",
        smb_source(samba, username=READER, path="hr"),
        rf"\(STATUS_ACCESS_DENIED\): user '{READER}' may not list it; grant it read access",
    )
    monkeypatch.setenv("SMB_PASSWORD", "not-the-crawler-password")
    message = refused(
        session,
        "smb",
        smb_source(samba),
        rf"^SMB server 127\.0\.0\.1:{samba.port} refused the logon of user 'ferret-smb-crawler' "
        r"\(STATUS_LOGON_FAILURE\); check username and password; nothing was stored",
    )
    assert "not-the-crawler-password" not in message
