"""Query encoding micro-batched across concurrent searches: the same results as serial searches, in fewer forward
passes of the real model (its ``calls`` counter), and every caller gets its own rows or the batch's error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from sqlalchemy.orm import sessionmaker

from ferret.core.corpus.push import PushedDocument, PushIngestor
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import get_engine, session_scope
from ferret.core.db.migrate import upgrade
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.onnx_query_encoder import OnnxQueryEncoder
from ferret.core.encoder.query_batcher import QueryBatcher
from ferret.core.encoder.query_encoder import query_encoder
from ferret.core.encoder.registry import ModelRegistry, load_encoder
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.types import SearchHit, SearchMode, SearchRequest
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings, QueryEncoderKind
from ferret.core.sources.documents import Document

TOPICS = [
    "volcano eruptions and lava flows",
    "espresso brewing with finely ground coffee",
    "parental leave policy for employees",
    "blue-green deployment of the payment service",
    "salary bands and pay grades",
    "plate tectonics and earthquakes",
    "training a dual encoder on synthetic queries",
    "reciprocal rank fusion of dense and sparse results",
]
QUERIES = [f"{word} {topic}" for topic in TOPICS for word in ("about", "how does", "rules of")]


@dataclass
class Home:
    settings: FerretSettings
    backend: EdgeIndexBackend
    encoder: DualEncoder


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """A promoted corpus of 48 short documents; the query batcher waits up to 200 ms, so that threads started
    together on a loaded machine still meet in one batch."""
    settings = FerretSettings(home=tmp_path_factory.mktemp("batcher-home"), query_batch_window_ms=200)
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    with session_scope(settings.database_url) as session:
        corpus = create_corpus(session, "kb")
        documents = [
            PushedDocument(Document(external_id=f"{i}-{j}", text=f"Note {j} on {topic}: details, part {j}."))
            for i, topic in enumerate(TOPICS)
            for j in range(6)
        ]
        PushIngestor(session, settings, backend, corpus).push("test", documents)
        versions = VersionedCollection(session, settings, backend, corpus)
        model = ModelRegistry(session, settings).ensure_base()
        versions.promote(versions.build(model))
        encoder = load_encoder(model.path, settings)
    yield Home(settings, backend, encoder)
    backend.close()


def searcher_of(home: Home, settings: FerretSettings) -> Searcher:
    return Searcher(settings, home.backend, sessionmaker(get_engine(settings.database_url)))


@pytest.mark.parametrize(("mode", "tower"), [("hybrid", "onnx"), ("dense", "onnx"), ("hybrid", "torch")])
def test_concurrent_searches_give_the_serial_results_in_fewer_forward_passes(
    home: Home, mode: SearchMode, tower: QueryEncoderKind
) -> None:
    """With either query tower (ONNX Runtime, the default, or torch), counted by that tower's own ``calls``."""
    settings = home.settings.model_copy(update={"query_encoder": tower})
    encoder = query_encoder(home.encoder.path, settings)
    assert isinstance(encoder, OnnxQueryEncoder if tower == "onnx" else DualEncoder)
    searcher = searcher_of(home, settings)
    try:
        serial = [searcher.search("kb", query, k=5, mode=mode) for query in QUERIES]
        calls_before = encoder.calls
        concurrent: list[object] = [None] * len(QUERIES)
        start = threading.Barrier(len(QUERIES))

        def run(i: int) -> None:
            start.wait()
            concurrent[i] = searcher.search("kb", QUERIES[i], k=5, mode=mode)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(QUERIES))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        forward_passes = encoder.calls - calls_before
    finally:
        searcher.close()

    for alone, together in zip(serial, concurrent, strict=True):
        assert isinstance(together, list)
        assert [r.external_id for r in together] == [r.external_id for r in alone]
        assert [r.score for r in together] == pytest.approx([r.score for r in alone], abs=1e-5)
        assert all(r.text for r in together)  # hybrid payloads are read after the tie-break, for the kept hits
    assert forward_passes <= len(QUERIES) // 3, f"{len(QUERIES)} concurrent queries took {forward_passes} passes"


def test_each_caller_gets_its_own_rows_and_the_batch_error(home: Home) -> None:
    batcher = QueryBatcher(home.encoder.encode_queries, window_s=0.2, max_batch=64)
    try:
        requests = [QUERIES[:1], QUERIES[1:4], QUERIES[4:6]]
        answers: list[np.ndarray | None] = [None] * len(requests)
        start = threading.Barrier(len(requests))

        def run(i: int) -> None:
            start.wait()
            answers[i] = batcher.encode(requests[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert batcher.batches == 1 and batcher.queries == 6
        for queries, answer in zip(requests, answers, strict=True):
            assert answer is not None
            np.testing.assert_allclose(answer, home.encoder.encode_queries(queries), atol=1e-5)
        # A request of a whole batch or more (an evaluation run) is encoded at once, in the caller's thread.
        assert batcher.encode(QUERIES[:2]).shape == (2, home.encoder.dimension)
    finally:
        batcher.close()

    def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError(f"cannot encode {len(texts)} queries")

    failing = QueryBatcher(broken, window_s=0.0)
    try:
        with pytest.raises(RuntimeError, match="cannot encode 1 queries"):
            failing.encode(["x"])
    finally:
        failing.close()
    with pytest.raises(RuntimeError, match="closed"):
        failing.encode(["x"])
    with pytest.raises(ValueError, match="window_s"):
        QueryBatcher(broken, window_s=-1)


def test_several_workers_encode_batches_at_once(home: Home) -> None:
    """With two workers, a second batch is encoded while the first one is (as a server with two model instances):
    each call of ``encode`` waits until another is running, which one worker alone would never satisfy."""
    both_running = threading.Barrier(2, timeout=60)

    def encode(texts: list[str]) -> np.ndarray:
        both_running.wait()
        return home.encoder.encode_queries(texts)

    batcher = QueryBatcher(encode, window_s=0.0, max_batch=64, workers=2)
    answers: list[np.ndarray | None] = [None, None]

    def run(i: int) -> None:
        answers[i] = batcher.encode(QUERIES[i * 3 : i * 3 + 3])

    try:
        first = threading.Thread(target=run, args=(0,))
        first.start()
        while both_running.n_waiting == 0:  # the first batch is inside the encoder before the second is asked for
            time.sleep(0.01)
        second = threading.Thread(target=run, args=(1,))
        second.start()
        first.join()
        second.join()
    finally:
        batcher.close()
    assert batcher.batches == 2 and batcher.queries == 6
    for i, answer in enumerate(answers):
        assert answer is not None
        np.testing.assert_allclose(answer, home.encoder.encode_queries(QUERIES[i * 3 : i * 3 + 3]), atol=1e-5)
    with pytest.raises(ValueError, match="workers"):
        QueryBatcher(encode, workers=0)


def test_searches_take_turns_for_the_first_stage_and_a_long_batch_runs_at_once(home: Home) -> None:
    """On the embedded backend a search's first stage waits for its turn (Edge's queries hold the GIL); a batch of
    24 queries (an evaluation) needs no turn and runs as one Qdrant batch, with the results of the queries searched
    one by one. A search issued while another holds the turn completes only once the turn is given back."""

    class CountingBackend(EdgeIndexBackend):
        """The real Edge backend, recording how many first-stage queries each call sends to the shard."""

        sizes: ClassVar[list[int]] = []

        def search_batch(self, name: str, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
            self.sizes.append(len(requests))
            return super().search_batch(name, requests)

    backend = CountingBackend(home.settings.qdrant_path)
    searcher = Searcher(home.settings, backend, sessionmaker(get_engine(home.settings.database_url)))
    try:
        assert backend.serial_queries
        alone = [searcher.search("kb", query, k=5) for query in QUERIES]
        backend.sizes.clear()
        together = searcher.search_many("kb", QUERIES, k=5)
        assert backend.sizes == [2 * len(QUERIES)]  # hybrid: a dense and a BM25 query per search, in one batch

        lock = searcher._first_stage_lock
        assert lock is not None
        finished = threading.Event()

        def search_once() -> None:
            searcher.search("kb", QUERIES[0], k=5)
            finished.set()

        with lock:  # another search holds the turn
            waiting = threading.Thread(target=search_once)
            waiting.start()
            assert not finished.wait(1.0)
        assert finished.wait(60)
        waiting.join()
    finally:
        searcher.close()
        backend.close()
    for one, batch in zip(alone, together, strict=True):
        assert [r.external_id for r in batch] == [r.external_id for r in one]
