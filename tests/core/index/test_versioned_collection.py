"""Index versions of a corpus on a real SQLite database and embedded Qdrant Edge: build, promote, roll back,
collect, and builds that fail or are interrupted midway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from ferret.connectors.beir.connector import BeirConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.activation import INDEX, activation_history, last_activations
from ferret.core.db.corpus import corpus_counts, create_corpus
from ferret.core.db.index_version import active_index_version, create_index_version, list_index_versions
from ferret.core.db.models import Corpus, IndexState, IndexVersion, ModelVersion
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError
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
    with pytest.raises(ConflictError, match="nothing left to roll back to"):
        versions.rollback()

    versions.promote(versions.build(model))
    versions.build(model)  # ready but never active: not a rollback target

    with pytest.raises(ConflictError, match="nothing left to roll back to"):
        versions.rollback()
    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.READY}


def test_rollback_walks_back_through_the_activation_history_and_says_when_nothing_is_left(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    """Issue 11, item 12: rollback toggled between the last two versions (v3 -> v2 -> v3)."""
    for actor in ("cli:ann@host", "key:ops", "key:ops"):
        versions.promote(versions.build(model), actor=actor)

    assert versions.rollback(actor="cli:bob@host").version == 2
    assert backend.resolve_alias("kb") == "kb__v2"
    assert versions.rollback(actor="cli:bob@host").version == 1
    assert backend.resolve_alias("kb") == "kb__v1"
    with pytest.raises(ConflictError, match=r"nothing left to roll back to \(version 1 is the oldest"):
        versions.rollback()
    assert states(session, corpus) == {1: IndexState.ACTIVE, 2: IndexState.READY, 3: IndexState.READY}
    assert backend.resolve_alias("kb") == "kb__v1"

    history = [(a.version, a.actor, a.via) for a in activation_history(session, corpus, INDEX)]
    assert history == [
        (1, "cli:ann@host", "promote"),
        (2, "key:ops", "promote"),
        (3, "key:ops", "promote"),
        (2, "cli:bob@host", "rollback"),
        (1, "cli:bob@host", "rollback"),
    ]
    last = last_activations(session, corpus, INDEX)
    assert (last[1].via, last[2].via, last[3].via) == ("rollback", "rollback", "promote")

    versions.promote(list_index_versions(session, corpus)[2])  # v3 again: one step back is v1 now
    assert versions.rollback().version == 1


def test_rollback_passes_over_a_version_that_no_longer_serves(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    for _ in range(3):
        versions.promote(versions.build(model))
    versions.collect(keep=1)  # v1 retired, v2 kept

    assert versions.rollback().version == 2
    with pytest.raises(ConflictError, match="nothing left to roll back to"):
        versions.rollback()
    assert backend.resolve_alias("kb") == "kb__v2"


class _SwapFails(RuntimeError):
    pass


def test_a_promotion_whose_alias_swap_fails_changes_neither_history_nor_alias(
    session: Session,
    backend: EdgeIndexBackend,
    corpus: Corpus,
    model: ModelVersion,
    versions: VersionedCollection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions.promote(versions.build(model))
    versions.promote(versions.build(model))
    before = [(a.version, a.via, a.withdrawn) for a in activation_history(session, corpus, INDEX)]

    def refuse(alias: str, collection: str) -> None:
        raise _SwapFails("the index store refused the swap")

    monkeypatch.setattr(backend, "set_alias", refuse)
    with pytest.raises(_SwapFails):
        versions.rollback()
    monkeypatch.undo()

    assert [(a.version, a.via, a.withdrawn) for a in activation_history(session, corpus, INDEX)] == before
    assert states(session, corpus) == {1: IndexState.READY, 2: IndexState.ACTIVE}
    assert backend.resolve_alias("kb") == "kb__v2"
    assert versions.rollback().version == 1  # the same rollback, once the swap works


def test_a_promotion_whose_commit_fails_after_the_swap_puts_the_alias_back(
    session: Session, backend: EdgeIndexBackend, corpus: Corpus, model: ModelVersion, versions: VersionedCollection
) -> None:
    """The alias is swapped between flush and commit: a commit that fails must not leave search on the new version
    while the database and the history still name the old one."""
    versions.promote(versions.build(model))
    versions.promote(versions.build(model))

    def refuse_commit(_session: Session) -> None:
        raise _SwapFails("the database went away at commit")

    event.listen(session, "before_commit", refuse_commit)
    try:
        with pytest.raises(_SwapFails):
            versions.rollback()
    finally:
        event.remove(session, "before_commit", refuse_commit)

    assert backend.resolve_alias("kb") == "kb__v2"
    assert states(session, corpus) == {1: IndexState.READY, 2: IndexState.ACTIVE}
    assert [(a.version, a.withdrawn) for a in activation_history(session, corpus, INDEX)] == [(1, False), (2, False)]
    assert versions.rollback().version == 1
    assert backend.resolve_alias("kb") == "kb__v1"


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
