"""The one report of ingests, pushes and syncs (``DocumentReport``): each face keeps the JSON keys it always had."""

from __future__ import annotations

from ferret.core.corpus.document_diff import DocumentReport
from ferret.core.corpus.ingest import IngestReport
from ferret.core.sources.documents import SkippedItem
from ferret.core.sources.sync import SyncReport


def test_ingest_push_and_sync_share_one_report_with_their_own_keys() -> None:
    assert IngestReport is DocumentReport and SyncReport is DocumentReport
    report = DocumentReport(added=3, updated=2, unchanged=5, deleted=1, permissions_updated=4, passages_added=9)
    report.passages_deleted, report.stale, report.checkpoints = 2, 1, 6
    report.skipped.append(SkippedItem(external_id="a.jpg", reason="unsupported file type"))

    assert report.as_dict() == {
        "added": 3,
        "updated": 2,
        "unchanged": 5,
        "deleted": 1,
        "passages_added": 9,
        "passages_deleted": 2,
        "permissions_updated": 4,
        "stale": 1,
        "skipped": [{"external_id": "a.jpg", "reason": "unsupported file type"}],
    }
    counts = report.counts()
    duration = counts.pop("duration_s")
    assert isinstance(duration, float) and duration >= 0
    assert counts == {
        "new": 3,
        "changed": 2,
        "unchanged": 5,
        "deleted": 1,
        "permission_updates": 4,
        "skipped": 1,
        "passages_embedded": 9,
        "checkpoints": 6,
        "memberships_changed": 0,
        "pruned": False,
        "resumed": False,
    }
    # The sync's former field names still read the same counts.
    assert (report.new, report.changed, report.permission_updates, report.passages_embedded) == (3, 2, 4, 9)
    assert report.seen == report.documents_seen == 3 + 2 + 5 + 4
