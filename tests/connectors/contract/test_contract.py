"""The contract every incremental connector keeps, run against each one on its real server (or vendor stub):
first full sync, no-change re-sync, edit, rename, delete, permission-only change, interrupted sync resumed, server
errors and rate limits, oversized items skipped with a reason. Add a connector by adding a driver (``driver.py``).
"""

from __future__ import annotations

import pytest

from connectors.contract.catalog import driver_modules
from connectors.contract.driver import Driver
from connectors.contract.harness import Harness, Interrupting
from ferret.core.db.models import SyncState
from ferret.core.sources.sync import SyncFailedError

pytestmark = pytest.mark.slow
RATE_LIMITED = sorted(kind for kind, module in driver_modules().items() if module.SUPPORTS_RATE_LIMITS)

DOCS = {
    "fjords": ("Fjords", "Fjords are drowned glacial valleys carved by ice."),
    "moraine": ("Moraines", "Moraines mark where a glacier stopped and dropped its rocks."),
    "calving": ("Calving", "Icebergs calve from tidewater glaciers into the sea."),
}


def populate(driver: Driver) -> dict[str, str]:
    return {key: driver.create(key, title, text) for key, (title, text) in DOCS.items()}


def test_first_full_sync_indexes_everything_with_its_principals(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)

    run = harness.sync(driver.connector())

    assert run.state == SyncState.SUCCEEDED
    assert (run.counts["new"], run.counts["changed"], run.counts["deleted"]) == (3, 0, 0)
    documents = harness.documents()
    assert set(documents) == set(ids.values())
    assert all(row.acl_groups == [driver.principal("staff")] for row in documents.values())
    harness.index()
    assert harness.search("drowned glacial valleys", [driver.principal("staff")]) >= {ids["fjords"]}
    assert ids["fjords"] not in harness.search("drowned glacial valleys", ["public"])


def test_a_sync_with_no_change_embeds_nothing(driver: Driver, harness: Harness) -> None:
    populate(driver)
    harness.sync(driver.connector())
    harness.index()
    passages = harness.passage_ids()

    run = harness.sync(driver.connector())

    assert run.state == SyncState.SUCCEEDED
    assert (run.counts["new"], run.counts["changed"], run.counts["deleted"]) == (0, 0, 0)
    assert (run.counts["passages_embedded"], run.counts["permission_updates"]) == (0, 0)
    assert harness.passage_ids() == passages
    harness.assert_index_matches()


def test_an_edit_replaces_the_document_in_the_live_index(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    harness.sync(driver.connector())
    harness.index()

    driver.edit("fjords", "Kilimanjaro is a dormant volcano in Tanzania.")
    run = harness.sync(driver.connector())

    assert (run.counts["changed"], run.counts["new"], run.counts["deleted"]) == (1, 0, 0)
    assert "Kilimanjaro" in harness.documents()[ids["fjords"]].body
    assert ids["fjords"] in harness.search("dormant volcano Tanzania", [driver.principal("staff")])
    assert ids["fjords"] not in harness.search("drowned glacial valleys", [driver.principal("staff")])
    harness.assert_index_matches()


def test_a_rename_moves_the_document(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    harness.sync(driver.connector())
    harness.index()

    new_id = driver.rename("moraine", "moraine-renamed")
    harness.sync(driver.connector())

    documents = harness.documents()
    if new_id != ids["moraine"]:  # a path-keyed source; Confluence pages and Graph items keep their ids
        assert ids["moraine"] not in documents
    assert new_id in documents
    assert len(documents) == 3
    assert harness.search("glacier stopped rocks", [driver.principal("staff")]) >= {new_id}
    harness.assert_index_matches()


def test_a_deleted_document_leaves_the_database_and_the_index(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    harness.sync(driver.connector())
    harness.index()

    driver.delete("calving")
    run = harness.sync(driver.connector())

    assert run.counts["deleted"] == 1
    assert ids["calving"] not in harness.documents()
    assert ids["calving"] not in harness.search("icebergs calve tidewater", [driver.principal("staff")])
    harness.assert_index_matches()


def test_a_permission_only_change_updates_the_payload_without_re_embedding(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    harness.sync(driver.connector())
    harness.index()
    passages = harness.passage_ids(ids["fjords"])
    assert ids["fjords"] in harness.search("drowned glacial valleys", [driver.principal("staff")])

    driver.set_groups("fjords", ["auditors"])
    run = harness.sync(driver.connector())

    assert run.counts["permission_updates"] >= 1
    assert (run.counts["changed"], run.counts["passages_embedded"]) == (0, 0)
    assert harness.passage_ids(ids["fjords"]) == passages  # the same passages, so the same points: not re-embedded
    assert harness.documents()[ids["fjords"]].acl_groups == [driver.principal("auditors")]
    assert ids["fjords"] not in harness.search("drowned glacial valleys", [driver.principal("staff")])
    assert ids["fjords"] in harness.search("drowned glacial valleys", [driver.principal("auditors")])


def test_an_interrupted_sync_resumes_from_its_checkpoint(driver: Driver, harness: Harness) -> None:
    keys = [f"note-{i:02d}" for i in range(12)]
    ids = [
        driver.create(key, f"Note {i}", f"Field note {i} about glacier number {i} and its ice.")
        for i, key in enumerate(keys)
    ]

    with pytest.raises(SyncFailedError, match="resumes from the last checkpoint"):
        harness.sync(Interrupting(driver.connector(), after=8), checkpoint_every=3)
    stored = len(harness.documents())
    assert 3 <= stored <= 8  # the checkpoints before the kill are kept

    run = harness.sync(driver.connector(), checkpoint_every=3)

    assert run.state == SyncState.SUCCEEDED and run.counts["resumed"]
    assert set(harness.documents()) == set(ids)  # nothing lost
    assert run.counts["new"] == len(ids) - stored  # the resumed sync did not start over
    assert run.counts["unchanged"] < len(ids)
    harness.index()
    harness.assert_index_matches()  # no duplicate points


def test_server_errors_fail_the_sync_and_delete_nothing(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    harness.sync(driver.connector())

    driver.outage(True)
    try:
        with pytest.raises(SyncFailedError, match="nothing was deleted"):
            harness.sync(driver.connector())
    finally:
        driver.outage(False)

    assert set(harness.documents()) == set(ids.values())
    run = harness.sync(driver.connector())
    assert run.state == SyncState.SUCCEEDED and run.counts["deleted"] == 0


@pytest.mark.parametrize("contract_server", RATE_LIMITED, indirect=True)
def test_rate_limits_are_waited_out(driver: Driver, harness: Harness) -> None:
    ids = populate(driver)
    driver.rate_limit(2)

    run = harness.sync(driver.connector())

    assert run.state == SyncState.SUCCEEDED
    assert set(harness.documents()) == set(ids.values())


def test_oversized_items_are_skipped_with_a_reason(driver: Driver, harness: Harness) -> None:
    populate(driver)
    big = driver.create_oversized("huge")

    run = harness.sync(driver.connector())

    reasons = {item["external_id"]: item["reason"] for item in run.skipped}
    assert big in reasons and "over" in reasons[big]
    assert big not in harness.documents()
    assert run.counts["new"] == 3
