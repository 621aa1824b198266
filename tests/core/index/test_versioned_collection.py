"""Index versions of a corpus on a real SQLite database and embedded Qdrant Edge: build, promote, roll back,
collect, and builds that fail or are interrupted midway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from ferret.connectors.beir.connector import BeirConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import corpus_counts, create_corpus
from ferret.core.db.index_version import active_index_version, create_index_version, list_index_versions
from ferret.core.db.models import Corpus, IndexState, IndexVersion, ModelVersion
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError, NotFoundError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection, _build_lock
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings


@pytest.fixture
def corpus(session: Session, settings: FerretSettings, backend: EdgeIndexBackend, tiny_beir: Path) -> Corpus:
    corpus = create_corpus(session, "kb")
    Ingestor(session, settings, backend, corpus).run(BeirConnector(path=str(tiny_beir), name="beir"))
    return corpus


@pytest.fixture
def model(session: Session, settings: FerretSettings) -> ModelVersion:
    return ModelRegistry(session, settings).ensure_base()


@pytest.fixture
def versions(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, corpus: Corpus
) -> VersionedCollection:
    return VersionedCollection(session, settings, backend, corpus)


def states(session: Session, corpus: Corpus) -> dict[int, IndexState]:
    return {v.version: v.state for v in list_index_versions(session, corpus)}


def top_hit(session: Session, settings: FerretSettings, backend: EdgeIndexBackend, query: str) -> str:
    return Searcher.over(session, settings, backend).search("kb", query, k=1)[0].external_id


def test_build_makes_a_complete_ready_version_that_is_not_active(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    progress: list[tuple[str, float]] = []

    built = versions.build(model, progress=lambda activity, fraction: progress.append((activity, fraction)))

    _, passages = corpus_counts(session, corpus)
    assert built.state == IndexState.READY
    assert built.version == 1
    assert built.collection == "kb__v1"
    assert built.passage_count == built.point_count == passages == 6
    assert built.ready_at is not None and built.activated_at is None
    assert backend.count(built.collection) == passages
    assert progress[-1] == ("indexing", 1.0)
    assert active_index_version(session, corpus) is None
    assert backend.resolve_alias("kb") is None


def test_promote_points_the_alias_at_the_version(
    session: Session,
    settings: FerretSettings,
    backend: EdgeIndexBackend,
    corpus: Corpus,
    model: ModelVersion,
    versions: VersionedCollection,
) -> None:
    built = versions.build(model)

    promoted = versions.promote(built)

    assert promoted.state == IndexState.ACTIVE
    assert promoted.activated_at is not None
    assert active_index_version(session, corpus) == built
    assert backend.resolve_alias("kb") == "kb__v1"
    assert top_hit(session, settings, backend, "What is the capital of France?") == "d1"
    assert versions.promote(built) == built  # promoting the active version again changes nothing


def test_second_promotion_demotes_the_first_and_rollback_restores_it(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    first = versions.promote(versions.build(model))
    second = versions.build(model)

    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.READY}
    assert backend.resolve_alias("kb") == first.collection  # a new build leaves search alone until promotion

    versions.promote(second)

    assert states(session, corpus) == {1: IndexState.READY, 2: IndexState.ACTIVE}
    assert backend.resolve_alias("kb") == second.collection
    assert backend.collection_exists(first.collection)

    rolled_back = versions.rollback()

    assert rolled_back == first
    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.READY}
    assert backend.resolve_alias("kb") == first.collection


def test_rollback_without_an_earlier_version_is_a_user_error(
    session: Session, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    with pytest.raises(NotFoundError, match="no earlier ready version"):
        versions.rollback()

    versions.promote(versions.build(model))
    versions.build(model)  # ready but never active: not a rollback target

    with pytest.raises(NotFoundError, match="no earlier ready version"):
        versions.rollback()
    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.READY}


def test_collect_retires_old_ready_versions_but_never_the_active_one(
    session: Session,
    settings: FerretSettings,
    backend: EdgeIndexBackend,
    corpus: Corpus,
    model: ModelVersion,
    versions: VersionedCollection,
) -> None:
    for _ in range(3):
        versions.promote(versions.build(model))
    assert states(session, corpus) == {1: IndexState.READY, 2: IndexState.READY, 3: IndexState.ACTIVE}

    retired = versions.collect(keep=1)

    assert [v.version for v in retired] == [1]
    assert states(session, corpus) == {1: IndexState.RETIRED, 2: IndexState.READY, 3: IndexState.ACTIVE}
    assert not backend.collection_exists("kb__v1")
    assert backend.collection_exists("kb__v2")

    retired = versions.collect(keep=0)

    assert [v.version for v in retired] == [2]
    assert states(session, corpus) == {1: IndexState.RETIRED, 2: IndexState.RETIRED, 3: IndexState.ACTIVE}
    assert backend.list_collections() == ["kb__v3"]
    assert backend.resolve_alias("kb") == "kb__v3"
    assert top_hit(session, settings, backend, "largest planet in the solar system") == "d3"
    assert versions.collect(keep=0) == []


def test_collect_keeps_an_active_version_older_than_the_ready_ones(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    versions.promote(versions.build(model))
    versions.promote(versions.build(model))
    versions.rollback()  # v1 active again, v2 ready

    versions.collect(keep=0)

    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.RETIRED}
    assert backend.list_collections() == ["kb__v1"]
    assert backend.resolve_alias("kb") == "kb__v1"


def test_a_retired_version_cannot_be_promoted(
    session: Session, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    old = versions.promote(versions.build(model))
    versions.promote(versions.build(model))
    versions.collect(keep=0)

    with pytest.raises(ConflictError, match="retired"):
        versions.promote(old)


@pytest.mark.parametrize(
    ("failure", "expected_error"),
    [(RuntimeError("disk full"), "RuntimeError: disk full"), (KeyboardInterrupt(), "interrupted")],
    ids=["error", "interrupt"],
)
def test_a_failed_build_leaves_search_on_the_previous_version(
    session: Session,
    settings: FerretSettings,
    backend: EdgeIndexBackend,
    fail_upserts: Callable[[BaseException | None], None],
    corpus: Corpus,
    model: ModelVersion,
    versions: VersionedCollection,
    failure: BaseException,
    expected_error: str,
) -> None:
    first = versions.promote(versions.build(model))
    fail_upserts(failure)

    with pytest.raises(type(failure)):
        versions.build(model)

    fail_upserts(None)
    failed = list_index_versions(session, corpus)[-1]
    assert failed.version == 2
    assert failed.state == IndexState.FAILED
    assert failed.error == expected_error
    assert not backend.collection_exists(failed.collection)  # the partial collection is removed
    assert backend.resolve_alias("kb") == first.collection
    assert active_index_version(session, corpus) == first
    assert top_hit(session, settings, backend, "how is espresso coffee brewed") == "d4"

    with pytest.raises(ConflictError, match="failed"):
        versions.promote(failed)

    retry = versions.build(model)  # the next build simply takes the next number
    assert (retry.version, retry.state) == (3, IndexState.READY)


def test_building_an_empty_corpus_is_refused(
    session: Session, settings: FerretSettings, backend: EdgeIndexBackend, model: ModelVersion
) -> None:
    empty = create_corpus(session, "empty")

    with pytest.raises(ConflictError, match="no passages"):
        VersionedCollection(session, settings, backend, empty).build(model)

    assert list_index_versions(session, empty) == []
    assert backend.list_collections() == []


def test_promoting_a_version_of_another_corpus_is_refused(
    session: Session,
    settings: FerretSettings,
    backend: EdgeIndexBackend,
    tiny_beir: Path,
    model: ModelVersion,
    versions: VersionedCollection,
) -> None:
    other = create_corpus(session, "other")
    Ingestor(session, settings, backend, other).run(BeirConnector(path=str(tiny_beir), name="beir"))
    foreign: IndexVersion = VersionedCollection(session, settings, backend, other).build(model)

    with pytest.raises(ConflictError, match="another corpus"):
        versions.promote(foreign)

    assert backend.resolve_alias("kb") is None


def test_a_build_abandoned_by_a_dead_process_is_marked_failed_and_removed(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    # What a build killed by SIGKILL leaves: a building row, a partial collection, and no lock holder.
    abandoned = create_index_version(session, corpus, model, backend.kind)
    session.commit()
    backend.create_collection(abandoned.collection, model.dimension)

    built = versions.build(model)

    assert (built.version, built.state) == (2, IndexState.READY)
    assert abandoned.state == IndexState.FAILED
    assert abandoned.error == "the build process stopped before finishing"
    assert not backend.collection_exists(abandoned.collection)


def test_a_build_still_running_elsewhere_is_left_alone(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    running = create_index_version(session, corpus, model, backend.kind)
    backend.create_collection(running.collection, model.dimension)
    with _build_lock(versions._lock_path(running)):  # another build process holds its lock
        session.commit()

        assert versions.recover_abandoned_builds() == []
        versions.collect(keep=0)

        assert running.state == IndexState.BUILDING
        assert backend.collection_exists(running.collection)

    assert versions.recover_abandoned_builds() == [running]  # its process is gone now
    assert running.state == IndexState.FAILED
