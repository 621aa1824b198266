"""Incremental ingestion of a real folder into SQLite and into every live Qdrant Edge index version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.chunking import passage_text
from ferret.core.corpus.ingest import Ingestor, IngestReport
from ferret.core.db.corpus import corpus_counts, create_corpus, get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.index_version import live_index_versions
from ferret.core.db.models import Corpus, Document, IndexState, Passage
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import InvalidInputError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.sparse import SparseEncoder
from ferret.core.index.types import SearchHit, SearchRequest, point_id
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import ConnectorOutput, LoadConnector
from ferret.core.sources.documents import Document as SourceDocument
from ferret_testing import unlistable_folder

FILES: dict[str, str | bytes] = {
    "alpha.txt": "The zanzibar archipelago lies off the coast of Tanzania in the Indian Ocean.",
    "beta.md": "# Beta handbook\n\nEmployees take parental leave of sixteen weeks, fully paid.",
    "gamma.html": "<html><head><title>Gamma</title></head>"
    "<body><p>Glaciers carve fjords over millennia.</p></body></html>",
    "notes/delta.txt": "Sourdough bread rises slowly with wild yeast.",
    "image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "empty.txt": "   \n",
    "binary.txt": b"MZ\x00\x00\x03\x00binary",
}
DIMENSION = 384
DOCUMENT_IDS = {"alpha.txt", "beta.md", "gamma.html", "notes/delta.txt"}


@pytest.fixture
def folder(tmp_path: Path, make_files: Callable[[Path, dict[str, str | bytes]], Path]) -> Path:
    return make_files(tmp_path / "docs", FILES)


@pytest.fixture
def corpus(session: Session) -> Corpus:
    return create_corpus(session, "docs")


def ingest(session: Session, settings: FerretSettings, backend: EdgeIndexBackend, folder: Path) -> IngestReport:
    corpus = get_corpus(session, "docs")
    return Ingestor(session, settings, backend, corpus).run(FilesystemConnector(root=str(folder), name="files"))


def build_and_promote(session: Session, settings: FerretSettings, backend: EdgeIndexBackend) -> str:
    corpus = get_corpus(session, "docs")
    versions = VersionedCollection(session, settings, backend, corpus)
    return versions.promote(versions.build(ModelRegistry(session, settings).ensure_base())).collection


def passage_count(session: Session, corpus: Corpus) -> int:
    return corpus_counts(session, corpus)[1]


def points_of(backend: EdgeIndexBackend, collection: str, external_id: str | None = None) -> list[SearchHit]:
    """Every point of a collection (or of one document): an exact dense search ranks all points."""
    request = SearchRequest(
        limit=1000,
        mode="dense",
        dense=np.full(DIMENSION, DIMENSION**-0.5, dtype=np.float32),
        filters={"external_id": external_id} if external_id else {},
        exact=True,
    )
    return backend.search(collection, request)


def assert_index_matches_database(session: Session, backend: EdgeIndexBackend, corpus: Corpus) -> None:
    """Each live version holds exactly one point per passage in the database, with that passage's text."""
    passages = {
        point_id(corpus.id, passage.id): passage.text
        for passage in session.scalars(select(Passage).where(Passage.corpus_id == corpus.id))
    }
    for version in live_index_versions(session, corpus):
        points = {hit.id: hit.payload["text"] for hit in points_of(backend, version.collection)}
        assert points == passages, version.collection
        assert version.point_count == len(passages)


def sparse_top(backend: EdgeIndexBackend, collection: str, query: str) -> list[str]:
    request = SearchRequest(limit=5, mode="sparse", sparse=SparseEncoder().embed_query(query))
    return [hit.payload["external_id"] for hit in backend.search(collection, request)]


def test_first_ingest_adds_every_readable_file_and_lists_the_skipped_ones(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    report = ingest(session, settings, backend, folder)

    assert (report.added, report.updated, report.unchanged, report.deleted) == (4, 0, 0, 0)
    assert report.passages_added == passage_count(session, corpus) == 4
    skipped = {item.external_id: item.reason for item in report.skipped}
    assert set(skipped) == {"image.png", "empty.txt", "binary.txt"}
    assert "empty" in skipped["empty.txt"]
    assert "binary" in skipped["binary.txt"]
    assert ".png" in skipped["image.png"]
    assert report.as_dict()["skipped"] == [item.model_dump() for item in report.skipped]
    documents = {d.external_id: d for d in session.scalars(select(Document).where(Document.corpus_id == corpus.id))}
    assert set(documents) == DOCUMENT_IDS
    assert documents["beta.md"].title == "Beta handbook"
    assert documents["gamma.html"].title == "Gamma"


def test_reingesting_an_unchanged_folder_changes_nothing(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    ingest(session, settings, backend, folder)
    collection = build_and_promote(session, settings, backend)
    before = set(session.scalars(select(Passage.id).where(Passage.corpus_id == corpus.id)))

    (folder / "alpha.txt").touch()  # a newer mtime alone is no change
    report = ingest(session, settings, backend, folder)

    assert (report.added, report.updated, report.unchanged, report.deleted) == (0, 0, 4, 0)
    assert (report.passages_added, report.passages_deleted) == (0, 0)
    assert set(session.scalars(select(Passage.id).where(Passage.corpus_id == corpus.id))) == before
    assert backend.count(collection) == len(before)


def test_a_changed_file_replaces_its_points_in_the_live_index(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    ingest(session, settings, backend, folder)
    collection = build_and_promote(session, settings, backend)
    assert sparse_top(backend, collection, "zanzibar archipelago")[0] == "alpha.txt"

    (folder / "alpha.txt").write_text("Kilimanjaro is the highest mountain of Africa, a dormant volcano.")
    report = ingest(session, settings, backend, folder)

    assert (report.added, report.updated, report.unchanged, report.deleted) == (0, 1, 3, 0)
    assert (report.passages_added, report.passages_deleted) == (1, 1)
    new_points = points_of(backend, collection, "alpha.txt")
    assert len(new_points) == 1
    assert "Kilimanjaro" in new_points[0].payload["text"]
    assert "zanzibar" not in new_points[0].payload["text"]
    assert sparse_top(backend, collection, "kilimanjaro mountain")[0] == "alpha.txt"
    assert "alpha.txt" not in sparse_top(backend, collection, "zanzibar archipelago")
    assert_index_matches_database(session, backend, corpus)


def test_an_expanded_version_follows_a_changed_file_without_the_queries_written_for_its_old_text(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    from ferret.core.index.points import Expansion

    ingest(session, settings, backend, folder)
    build_and_promote(session, settings, backend)
    ids = {d.external_id: d.id for d in corpus.documents}
    expansion = Expansion({ids["alpha.txt"]: ["spice islands"], ids["gamma.html"]: ["norwegian inlets"]})
    versions = VersionedCollection(session, settings, backend, corpus)
    expanded = versions.build(ModelRegistry(session, settings).ensure_base(), expansion=expansion).collection
    assert sparse_top(backend, expanded, "spice islands")[0] == "alpha.txt"

    (folder / "alpha.txt").write_text("Kilimanjaro is the highest mountain of Africa, a dormant volcano.")
    ingest(session, settings, backend, folder)

    assert sparse_top(backend, expanded, "kilimanjaro mountain")[0] == "alpha.txt"
    assert "alpha.txt" not in sparse_top(backend, expanded, "spice islands")  # its queries were about the old text
    assert sparse_top(backend, expanded, "norwegian inlets")[0] == "gamma.html"  # an unchanged one keeps its own
    assert_index_matches_database(session, backend, corpus)  # both versions: one point per passage, its own text


def test_a_deleted_file_leaves_the_database_and_every_live_version(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    ingest(session, settings, backend, folder)
    first = build_and_promote(session, settings, backend)
    second = build_and_promote(session, settings, backend)  # first: ready, second: active
    assert {v.state for v in live_index_versions(session, corpus)} == {IndexState.READY, IndexState.ACTIVE}
    assert points_of(backend, first, "beta.md") and points_of(backend, second, "beta.md")

    (folder / "beta.md").unlink()
    report = ingest(session, settings, backend, folder)

    assert (report.added, report.updated, report.unchanged, report.deleted) == (0, 0, 3, 1)
    assert report.passages_deleted == 1
    assert session.scalar(select(Document).where(Document.external_id == "beta.md")) is None
    for collection in (first, second):
        assert points_of(backend, collection, "beta.md") == []
        assert "beta.md" not in sparse_top(backend, collection, "parental leave")
        assert backend.count(collection) == passage_count(session, corpus) == 3
    assert_index_matches_database(session, backend, corpus)


def test_a_folder_that_cannot_be_listed_stops_the_ingest_before_any_deletion(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    ingest(session, settings, backend, folder)
    (folder / "notes" / "delta.txt").unlink()  # a removal, which a partial listing cannot tell from a missed folder
    unlistable_folder(folder / "notes")

    with pytest.raises(InvalidInputError, match=r"^Nothing was changed: folder .* cannot be listed \(File name too"):
        ingest(session, settings, backend, folder)

    assert set(session.scalars(select(Document.external_id).where(Document.corpus_id == corpus.id))) == DOCUMENT_IDS


def test_a_file_that_can_no_longer_be_read_keeps_its_last_version_and_is_reported(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    ingest(session, settings, backend, folder)
    (folder / "beta.md").write_bytes(b"MZ\x00\x00\x03\x00binary")  # still there, no longer text

    report = ingest(session, settings, backend, folder)

    assert (report.added, report.updated, report.deleted) == (0, 0, 0)
    assert "beta.md" in {item.external_id for item in report.skipped}
    assert set(session.scalars(select(Document.external_id).where(Document.corpus_id == corpus.id))) == DOCUMENT_IDS


def test_a_folder_that_lists_nothing_deletes_nothing_and_says_why(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    """An unmounted share or an emptied folder is an outage, not the removal of every document."""
    ingest(session, settings, backend, folder)
    collection = build_and_promote(session, settings, backend)
    for path in [p for p in folder.rglob("*") if p.is_file() and p.name != "image.png"]:
        path.unlink()  # left: one file with nothing readable, which lists as empty as no file at all

    with pytest.raises(InvalidInputError, match=r"^Nothing was changed: .*docs lists no readable document") as error:
        ingest(session, settings, backend, folder)

    assert str(error.value).endswith(
        "while source 'files' of corpus 'docs' holds 4; check it is mounted and readable, or empty the corpus with "
        "`ferret source remove docs files --yes`."
    )
    assert passage_count(session, corpus) == backend.count(collection) == 4
    assert set(session.scalars(select(Document.external_id).where(Document.corpus_id == corpus.id))) == DOCUMENT_IDS


def test_another_folder_in_the_same_source_is_refused_but_a_moved_one_is_read(
    session: Session,
    settings: FerretSettings,
    backend: EdgeIndexBackend,
    corpus: Corpus,
    folder: Path,
    tmp_path: Path,
    make_files: Callable[[Path, dict[str, str | bytes]], Path],
) -> None:
    ingest(session, settings, backend, folder)
    collection = build_and_promote(session, settings, backend)
    other = make_files(tmp_path / "marketing", {"plan.md": "# Plan\n\nThe launch campaign starts in spring."})

    with pytest.raises(InvalidInputError, match=r"reads .*docs, and reading .*marketing instead would delete 4 of"):
        ingest(session, settings, backend, other)
    assert backend.count(collection) == passage_count(session, corpus) == 4
    assert session.scalar(select(Document).where(Document.external_id == "plan.md")) is None

    moved = folder.rename(tmp_path / "moved")  # the same files elsewhere: nothing to delete, so it goes through
    report = ingest(session, settings, backend, moved)
    assert (report.added, report.unchanged, report.deleted) == (0, 4, 0)
    (moved / "beta.md").unlink()  # and from now on the new folder's own deletions are deletions
    assert ingest(session, settings, backend, moved).deleted == 1


def test_changes_reach_the_index_after_it_is_reopened(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    """What an ingest writes into the embedded shards is on disk when the next process opens them."""
    ingest(session, settings, backend, folder)
    collection = build_and_promote(session, settings, backend)
    (folder / "notes" / "epsilon.txt").write_text("Kilimanjaro is the highest mountain of Africa.")
    ingest(session, settings, backend, folder)
    backend.close()

    reopened = EdgeIndexBackend(settings.qdrant_path)
    try:
        assert reopened.count(collection) == 5
        assert sparse_top(reopened, "docs", "kilimanjaro")[0] == "notes/epsilon.txt"
    finally:
        reopened.close()


def test_a_long_document_is_chunked_into_passages_within_the_token_limit(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, tmp_path: Path, tokenizer: Any
) -> None:
    corpus = create_corpus(session, "long", max_passage_tokens=64, passage_overlap_tokens=8)
    sentences = [f"Sentence number {i} talks about topic {i % 7} and its many consequences." for i in range(60)]
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "report.txt").write_text(" ".join(sentences))

    report = Ingestor(session, settings, backend, corpus).run(FilesystemConnector(root=str(tmp_path / "long")))

    document = session.scalar(select(Document).where(Document.corpus_id == corpus.id))
    assert document is not None
    passages = document.passages
    assert report.passages_added == len(passages) >= 5
    assert [p.ordinal for p in passages] == list(range(len(passages)))
    for passage in passages:
        wordpieces = len(tokenizer(passage_text(document.title, passage.text), add_special_tokens=False)["input_ids"])
        assert passage.token_count <= 64
        assert wordpieces <= 64
    assert passages[0].text.startswith("Sentence number 0 ")
    assert passages[-1].text.endswith("consequences.")


def test_a_failed_index_sync_rolls_back_and_a_rerun_succeeds_without_duplicates(
    settings: FerretSettings,
    database_url: str,
    backend: EdgeIndexBackend,
    fail_upserts: Callable[[BaseException | None], None],
    folder: Path,
) -> None:
    with session_scope(database_url) as session:
        create_corpus(session, "docs")
        ingest(session, settings, backend, folder)
        collection = build_and_promote(session, settings, backend)
    with session_scope(database_url) as session:
        before = {
            (d.external_id, d.content_hash, tuple(p.id for p in d.passages)) for d in session.scalars(select(Document))
        }
    (folder / "alpha.txt").write_text("Kilimanjaro is the highest mountain of Africa, a dormant volcano.")
    (folder / "notes" / "epsilon.txt").write_text("Espresso is brewed by forcing hot water through coffee.")
    fail_upserts(RuntimeError("qdrant went away"))

    with pytest.raises(RuntimeError, match="qdrant went away"), session_scope(database_url) as session:
        ingest(session, settings, backend, folder)

    fail_upserts(None)
    with session_scope(database_url) as session:
        after = {
            (d.external_id, d.content_hash, tuple(p.id for p in d.passages)) for d in session.scalars(select(Document))
        }
        assert after == before  # the database is exactly as before the failed run
        report = ingest(session, settings, backend, folder)
        passages = session.scalar(select(func.count(Passage.id))) or 0

    assert (report.added, report.updated, report.unchanged) == (1, 1, 3)
    assert backend.count(collection) == passages == 5
    assert len(points_of(backend, collection, "alpha.txt")) == 1
    assert sparse_top(backend, collection, "kilimanjaro")[0] == "alpha.txt"
    assert sparse_top(backend, collection, "espresso coffee")[0] == "notes/epsilon.txt"
    with session_scope(database_url) as session:
        assert_index_matches_database(session, backend, get_corpus(session, "docs"))


@pytest.mark.parametrize("change", ["new file removed", "changed file reverted"])
def test_a_failed_index_sync_leaves_index_and_database_in_step_when_the_source_changes_before_the_rerun(
    settings: FerretSettings,
    database_url: str,
    backend: EdgeIndexBackend,
    fail_upserts: Callable[[BaseException | None], None],
    folder: Path,
    change: str,
) -> None:
    with session_scope(database_url) as session:
        create_corpus(session, "docs")
        ingest(session, settings, backend, folder)
        collection = build_and_promote(session, settings, backend)
    alpha = folder / "alpha.txt"
    original = alpha.read_text()
    secret = folder / "notes" / "secret.txt"
    if change == "new file removed":
        secret.write_text("The merger with Kilimanjaro Corp closes on Friday.")
    else:
        alpha.write_text("Kilimanjaro is the highest mountain of Africa.")
    fail_upserts(RuntimeError("qdrant went away"))
    with pytest.raises(RuntimeError), session_scope(database_url) as session:
        ingest(session, settings, backend, folder)
    fail_upserts(None)

    # The user undoes the change, then runs the ingest again.
    if change == "new file removed":
        secret.unlink()
    else:
        alpha.write_text(original)
    with session_scope(database_url) as session:
        ingest(session, settings, backend, folder)

    top = sparse_top(backend, collection, "kilimanjaro merger zanzibar archipelago")
    assert "notes/secret.txt" not in top  # a removed file must not stay searchable
    assert "alpha.txt" in top  # an unchanged file must not vanish from the index
    with session_scope(database_url) as session:
        assert_index_matches_database(session, backend, get_corpus(session, "docs"))


class RepeatingConnector(LoadConnector):
    """A source that delivers the same id twice (a buggy or eventually consistent API)."""

    kind = "repeating"

    def load_from_source(self) -> ConnectorOutput:
        yield SourceDocument(external_id="a", title="First", text="The first copy of a.", source="repeating")
        yield SourceDocument(external_id="a", title="Second", text="The second copy of a.", source="repeating")
        yield SourceDocument(external_id="b", title="B", text="Document b.", source="repeating")


def test_a_repeated_id_in_one_load_keeps_the_first_and_reports_the_rest(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus
) -> None:
    report = Ingestor(session, settings, backend, corpus).run(RepeatingConnector())

    assert (report.added, report.unchanged) == (2, 0)
    assert [(item.external_id, item.reason) for item in report.skipped] == [("a", "duplicate id; first one kept")]
    document = session.scalar(select(Document).where(Document.external_id == "a"))
    assert document is not None and document.title == "First"

    again = Ingestor(session, settings, backend, corpus).run(RepeatingConnector())

    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 2, 0)


def test_an_incremental_ingest_keeps_every_live_versions_passage_count_true(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus, folder: Path
) -> None:
    """Issue 11, item 12: `ferret index list` showed 357 passages for 112 points after an incremental ingest."""
    ingest(session, settings, backend, folder)
    build_and_promote(session, settings, backend)
    build_and_promote(session, settings, backend)  # a ready version and an active one
    (folder / "epsilon.txt").write_text("Lighthouses guided ships along the rocky coast of Brittany.")
    (folder / "zeta.txt").write_text("Beekeepers harvest honey in late summer from the upper boxes.")
    (folder / "gamma.html").unlink()

    report = ingest(session, settings, backend, folder)

    assert (report.added, report.deleted) == (2, 1)
    total = passage_count(session, corpus)
    assert total == 5
    with session_scope(settings.database_url) as fresh:  # what `ferret index list` reads, from the committed rows
        versions = live_index_versions(fresh, get_corpus(fresh, "docs"))
        assert len(versions) == 2
        for version in versions:
            assert (version.passage_count, version.point_count) == (total, total), version.collection
