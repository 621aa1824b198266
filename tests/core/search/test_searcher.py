"""The Searcher over a real active index version: documents deduplicated, access control inside the query,
and user errors reported as FerretError subclasses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import create_corpus, get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.index_version import active_index_version
from ferret.core.db.migrate import upgrade
from ferret.core.db.models import Corpus, IndexVersion
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.types import SEARCH_MODES, SearchMode
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings

LONG_VOLCANO_TEXT = " ".join(
    f"Volcano fact {i}: magma rises through the crust and the volcano erupts lava, ash and volcanic gas."
    for i in range(12)
)
FILES: dict[str, str] = {
    "volcanoes.txt": LONG_VOLCANO_TEXT,
    "geology.txt": "Plate tectonics explains earthquakes, mountains and where a volcano forms.",
    "espresso.txt": "Espresso coffee is brewed by forcing hot water through finely ground beans.",
    "hr/salaries.txt": "Salary bands and pay grades for every employee are confidential.",
    "hr/leave.txt": "Parental leave lasts sixteen weeks at full salary.",
    "eng/deploy.txt": "Engineers deploy the payment service with a blue-green rollout.",
}
PUBLIC = {"volcanoes.txt", "geology.txt", "espresso.txt"}
HR = {"hr/salaries.txt", "hr/leave.txt"}
ENG = {"eng/deploy.txt"}


def ingest_files(session: Session, settings: FerretSettings, backend: EdgeIndexBackend, folder: Path) -> Corpus:
    """Six files, one of them long enough for several 64-token passages; hr/ and eng/ restricted to their group."""
    for relative, text in FILES.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    corpus = create_corpus(session, "kb", max_passage_tokens=64, passage_overlap_tokens=8)
    connector = FilesystemConnector(root=str(folder), acl={"hr/*": ["hr"], "eng/*": ["eng"]})
    Ingestor(session, settings, backend, corpus).run(connector)
    return corpus


@dataclass
class Installation:
    settings: FerretSettings
    session: Session
    backend: EdgeIndexBackend


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory, encoder: DualEncoder) -> Iterator[Installation]:
    """One home with the corpus built and promoted, shared by the tests that only search."""
    home = tmp_path_factory.mktemp("search-home")
    settings = FerretSettings(home=home)
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    with session_scope(settings.database_url) as session:
        corpus = ingest_files(session, settings, backend, home / "docs")
        versions = VersionedCollection(session, settings, backend, corpus)
        versions.promote(versions.build(ModelRegistry(session, settings).ensure_base()))
        yield Installation(settings, session, backend)
    backend.close()


@pytest.fixture
def searcher(installation: Installation) -> Searcher:
    return Searcher.over(installation.session, installation.settings, installation.backend)


@pytest.fixture
def active(installation: Installation) -> IndexVersion:
    corpus = get_corpus(installation.session, "kb")
    version = active_index_version(installation.session, corpus)
    assert version is not None
    return version


@pytest.fixture
def versions(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, tmp_path: Path
) -> VersionedCollection:
    """A corpus of this test only (ingested, nothing built), for tests that change index versions."""
    return VersionedCollection(session, settings, backend, ingest_files(session, settings, backend, tmp_path / "docs"))


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_results_are_documents_not_passages(searcher: Searcher, active: IndexVersion, mode: SearchMode) -> None:
    assert active.point_count > len(FILES)  # the long file has several passages

    results = searcher.search("kb", "volcano magma erupts lava", k=10, mode=mode)

    ids = [result.document_id for result in results]
    assert len(ids) == len(set(ids))
    assert results[0].external_id == "volcanoes.txt"
    assert [result.score for result in results] == sorted((result.score for result in results), reverse=True)
    assert searcher.search("kb", "volcano magma erupts lava", k=1, mode=mode)[0].external_id == "volcanoes.txt"


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_a_long_document_does_not_crowd_out_the_others(
    searcher: Searcher, active: IndexVersion, mode: SearchMode
) -> None:
    results = searcher.search("kb", "volcano magma erupts lava", k=2, mode=mode)

    assert len(results) == 2
    assert results[0].external_id == "volcanoes.txt"


def test_a_result_carries_what_the_ui_shows(searcher: Searcher, active: IndexVersion) -> None:
    result = searcher.search("kb", "espresso coffee", k=1, mode="hybrid")[0]

    assert (result.external_id, result.title, result.source) == ("espresso.txt", "espresso", "filesystem")
    assert result.text == FILES["espresso.txt"]
    assert result.metadata["extension"] == ".txt"


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_a_caller_sees_public_documents_and_their_own_groups_only(
    searcher: Searcher, active: IndexVersion, mode: SearchMode
) -> None:
    query = "salary pay grades parental leave deploy payment service volcano espresso"

    as_engineer = {r.external_id for r in searcher.search("kb", query, k=50, mode=mode, acl_groups=["eng"])}
    as_hr = {r.external_id for r in searcher.search("kb", query, k=50, mode=mode, acl_groups=["hr"])}
    as_nobody = {r.external_id for r in searcher.search("kb", query, k=50, mode=mode, acl_groups=[])}
    as_admin = {r.external_id for r in searcher.search("kb", query, k=50, mode=mode, acl_groups=None)}

    assert as_engineer <= PUBLIC | ENG and as_engineer >= ENG
    assert as_hr <= PUBLIC | HR and as_hr >= HR
    assert as_nobody <= PUBLIC and as_nobody
    assert as_admin >= HR | ENG


def test_a_restricted_document_is_not_found_even_by_its_exact_words(searcher: Searcher, active: IndexVersion) -> None:
    for mode in SEARCH_MODES:
        results = searcher.search("kb", FILES["hr/salaries.txt"], k=10, mode=mode, acl_groups=["eng"])
        assert "hr/salaries.txt" not in {r.external_id for r in results}
        assert searcher.search("kb", FILES["hr/salaries.txt"], k=1, mode=mode, acl_groups=["hr"])[0].external_id == (
            "hr/salaries.txt"
        )


def test_filters_narrow_the_results(searcher: Searcher, active: IndexVersion) -> None:
    results = searcher.search("kb", "volcano", k=10, filters={"external_id": ["geology.txt", "espresso.txt"]})

    assert {r.external_id for r in results} <= {"geology.txt", "espresso.txt"}
    assert results[0].external_id == "geology.txt"


def test_search_many_answers_each_query_in_order(searcher: Searcher, active: IndexVersion) -> None:
    results = searcher.search_many("kb", ["espresso coffee", "plate tectonics earthquakes"], k=1)

    assert [r[0].external_id for r in results] == ["espresso.txt", "geology.txt"]


def test_a_ready_version_can_be_searched_explicitly_and_a_retired_one_cannot(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, versions: VersionedCollection
) -> None:
    searcher = Searcher.over(session, settings, backend)
    model = ModelRegistry(session, settings).ensure_base()
    versions.promote(versions.build(model))
    newer = versions.build(model)

    assert searcher.search("kb", "espresso", k=1, index_version=newer)[0].external_id == "espresso.txt"

    versions.collect(keep=0)
    with pytest.raises(ConflictError, match="retired"):
        searcher.search("kb", "espresso", k=1, index_version=newer)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_query_is_a_user_error(searcher: Searcher, active: IndexVersion, query: str) -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        searcher.search("kb", query)


def test_an_unknown_corpus_is_not_found(searcher: Searcher, active: IndexVersion) -> None:
    with pytest.raises(NotFoundError, match="nope"):
        searcher.search("nope", "volcano")


def test_a_corpus_without_an_active_index_is_a_conflict(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, versions: VersionedCollection
) -> None:
    searcher = Searcher.over(session, settings, backend)
    with pytest.raises(ConflictError, match="no active index"):
        searcher.search("kb", "volcano")

    versions.build(ModelRegistry(session, settings).ensure_base())  # built but not promoted

    with pytest.raises(ConflictError, match="no active index"):
        searcher.search("kb", "volcano")


@pytest.mark.parametrize("mode", ["bad", "DENSE", "bm25"])
def test_an_unknown_mode_is_a_user_error(searcher: Searcher, active: IndexVersion, mode: str) -> None:
    with pytest.raises(InvalidInputError, match="mode"):
        searcher.search("kb", "volcano", mode=mode)  # what an API caller may send


@pytest.mark.parametrize("k", [0, -1, 1001])
def test_k_out_of_range_is_a_user_error(searcher: Searcher, active: IndexVersion, k: int) -> None:
    with pytest.raises(InvalidInputError, match="k must be"):
        searcher.search("kb", "volcano", k=k)
