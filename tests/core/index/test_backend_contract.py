"""The one contract every index backend keeps, run against each (after Haystack's ``testing/document_store.py``).

Backends (the ``index_backend`` fixture of conftest): embedded Qdrant Edge; the server backend over qdrant-client's
in-process ``QdrantClient(":memory:")`` (same client API, aliases included); and, when ``FERRET_QDRANT_URL`` is set,
the server backend against that real server. Vectors are real MiniLM embeddings and real BM25 sparse vectors.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.index.backend import IndexBackend
from ferret.core.index.sparse import SparseEncoder
from ferret.core.index.types import (
    SEARCH_MODES,
    IndexPoint,
    SearchHit,
    SearchMode,
    SearchRequest,
    point_id,
)

# qdrant-client's local mode warns that payload indexes do nothing in it; that is expected here.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

CORPUS_ID = 7
DIMENSION = 384

# (external id, title, text, acl groups, source)
DOCUMENTS: list[tuple[str, str, str, list[str], str]] = [
    ("paris", "Paris", "Paris is the capital and largest city of France.", ["public"], "wiki"),
    ("jupiter", "Jupiter", "Jupiter is the largest planet in the solar system.", ["public"], "wiki"),
    (
        "espresso",
        "Espresso",
        "Espresso coffee is brewed by forcing hot water through ground beans.",
        ["public"],
        "wiki",
    ),
    ("salaries", "Salary bands", "Salary bands and pay grades of every employee, confidential.", ["hr"], "intranet"),
    ("deploy", "Deploy guide", "How engineers deploy the payment service to production.", ["eng"], "intranet"),
    ("volcano", "Volcanoes", "A volcano erupts when magma reaches the surface of the earth.", ["public"], "wiki"),
    ("chess", "Chess", "In chess the king is checkmated when it cannot escape an attack.", ["public", "eng"], "wiki"),
    ("bread", "Sourdough", "Sourdough bread rises with wild yeast and lactic acid bacteria.", ["public"], "blog"),
]

# (query, expected top external id) — each query shares content words with its document, so BM25 finds it too.
QUERIES = [
    ("What is the capital city of France?", "paris"),
    ("largest planet of the solar system", "jupiter"),
    ("how is espresso coffee brewed", "espresso"),
    ("sourdough bread yeast", "bread"),
]


@dataclass(frozen=True)
class Embedded:
    points: list[IndexPoint]
    sparse: SparseEncoder
    encoder: DualEncoder
    query_vectors: dict[str, np.ndarray] = field(default_factory=dict)

    def query_vector(self, query: str) -> np.ndarray:
        if query not in self.query_vectors:
            self.query_vectors[query] = self.encoder.encode_queries([query])[0]
        return self.query_vectors[query]

    def request(
        self,
        query: str,
        mode: SearchMode,
        *,
        limit: int = 10,
        acl_groups: list[str] | None = None,
        filters: dict[str, str | int | list[str] | list[int]] | None = None,
    ) -> SearchRequest:
        return SearchRequest(
            limit=limit,
            mode=mode,
            dense=self.query_vector(query) if mode != "sparse" else None,
            sparse=self.sparse.embed_query(query) if mode != "dense" else None,
            acl_groups=acl_groups,
            filters=dict(filters or {}),
            exact=True,
        )

    def point(self, external_id: str) -> IndexPoint:
        return next(p for p in self.points if p.payload["external_id"] == external_id)


@pytest.fixture(scope="module")
def embedded(encoder: DualEncoder) -> Embedded:
    texts = [f"{title}\n{text}" for _, title, text, _, _ in DOCUMENTS]
    sparse = SparseEncoder(avg_len=8.0)
    dense = encoder.encode_passages(texts)
    sparse_vectors = sparse.embed_documents(texts)
    points = [
        IndexPoint(
            id=point_id(CORPUS_ID, passage_id),
            dense=dense[passage_id - 1],
            sparse=sparse_vectors[passage_id - 1],
            payload={
                "passage_id": passage_id,
                "document_id": 100 + passage_id,
                "external_id": external_id,
                "source": source,
                "title": title,
                "text": text,
                "acl_groups": groups,
                "metadata": {"lang": "en", "rank": passage_id},
            },
        )
        for passage_id, (external_id, title, text, groups, source) in enumerate(DOCUMENTS, start=1)
    ]
    return Embedded(points, sparse, encoder)


@pytest.fixture
def filled(index_backend: IndexBackend, names: dict[str, str], embedded: Embedded) -> str:
    """Collection v1 holding every document, finalized."""
    collection = names["v1"]
    index_backend.create_collection(collection, DIMENSION)
    index_backend.upsert(collection, embedded.points)
    index_backend.finalize(collection)
    return collection


@pytest.fixture(scope="module")
def shared(index_backend: IndexBackend, embedded: Embedded) -> Iterator[str]:
    """A collection holding every document, built once per backend for the tests that only read."""
    collection = f"t{uuid.uuid4().hex[:10]}__shared"
    index_backend.create_collection(collection, DIMENSION)
    index_backend.upsert(collection, embedded.points)
    index_backend.finalize(collection)
    yield collection
    index_backend.drop_collection(collection)


def external_ids(hits: list[SearchHit]) -> list[str]:
    return [hit.payload["external_id"] for hit in hits]


def test_create_list_and_drop_collections(index_backend: IndexBackend, names: dict[str, str]) -> None:
    index_backend.create_collection(names["v1"], DIMENSION)
    index_backend.create_collection(names["v2"], DIMENSION)

    assert {names["v1"], names["v2"]} <= set(index_backend.list_collections())
    assert index_backend.collection_exists(names["v1"])
    assert index_backend.count(names["v1"]) == 0

    index_backend.drop_collection(names["v1"])

    assert names["v1"] not in index_backend.list_collections()
    assert not index_backend.collection_exists(names["v1"])
    assert index_backend.collection_exists(names["v2"])
    index_backend.drop_collection(names["v1"])  # dropping a missing collection is not an error


def test_creating_an_existing_collection_raises(index_backend: IndexBackend, filled: str) -> None:
    with pytest.raises(FileExistsError):
        index_backend.create_collection(filled, DIMENSION)

    assert index_backend.count(filled) == len(DOCUMENTS)  # the existing data is untouched


def test_upsert_then_count(index_backend: IndexBackend, shared: str) -> None:
    assert index_backend.count(shared) == len(DOCUMENTS)


def test_upserting_the_same_points_twice_never_duplicates(
    index_backend: IndexBackend, filled: str, embedded: Embedded
) -> None:
    index_backend.upsert(filled, embedded.points)
    # A retried build computes the same ids from the same passages.
    retried = [
        IndexPoint(point_id(CORPUS_ID, p.payload["passage_id"]), p.dense, p.sparse, p.payload) for p in embedded.points
    ]
    index_backend.upsert(filled, retried)

    assert index_backend.count(filled) == len(DOCUMENTS)
    hits = index_backend.search(filled, embedded.request("capital of France", "dense", limit=len(DOCUMENTS)))
    assert len(hits) == len(set(hit.id for hit in hits)) == len(DOCUMENTS)


def test_upsert_replaces_the_payload_of_an_existing_point(
    index_backend: IndexBackend, filled: str, embedded: Embedded
) -> None:
    old = embedded.point("bread")
    index_backend.upsert(filled, [IndexPoint(old.id, old.dense, old.sparse, {**old.payload, "title": "Rye bread"})])

    hits = index_backend.search(filled, embedded.request("sourdough bread yeast", "dense", limit=1))

    assert index_backend.count(filled) == len(DOCUMENTS)
    assert hits[0].id == old.id
    assert hits[0].payload["title"] == "Rye bread"


def test_delete_removes_points(index_backend: IndexBackend, filled: str, embedded: Embedded) -> None:
    gone = [embedded.point("paris").id, embedded.point("jupiter").id]

    index_backend.delete(filled, gone)
    index_backend.delete(filled, [])  # nothing to delete is not an error

    assert index_backend.count(filled) == len(DOCUMENTS) - 2
    for mode in SEARCH_MODES:
        hits = index_backend.search(filled, embedded.request("capital of France, largest planet", mode, limit=20))
        assert not {"paris", "jupiter"} & set(external_ids(hits))


def test_search_returns_the_stored_payload(index_backend: IndexBackend, shared: str, embedded: Embedded) -> None:
    hit = index_backend.search(shared, embedded.request("What is the capital city of France?", "dense", limit=1))[0]

    assert hit.id == embedded.point("paris").id
    assert hit.payload == embedded.point("paris").payload


def test_dense_vectors_are_read_back_as_stored(index_backend: IndexBackend, shared: str, embedded: Embedded) -> None:
    paris, jupiter = embedded.point("paris"), embedded.point("jupiter")
    missing = "00000000-0000-0000-0000-000000000000"

    vectors = index_backend.dense_vectors(shared, [paris.id, jupiter.id, missing])

    assert set(vectors) == {paris.id, jupiter.id}  # a point that does not exist is left out
    np.testing.assert_allclose(vectors[paris.id], paris.dense, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(vectors[jupiter.id], jupiter.dense, rtol=1e-6, atol=1e-7)
    assert index_backend.dense_vectors(shared, []) == {}


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_search_finds_the_obvious_document(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    for query, expected in QUERIES:
        hits = index_backend.search(shared, embedded.request(query, mode, limit=3))

        assert hits, query
        assert external_ids(hits)[0] == expected, query
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_search_respects_the_limit(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    # Every document mentions "the", a stopword, so use words spread over several documents.
    hits = index_backend.search(shared, embedded.request("largest capital planet coffee bread chess", mode, limit=2))

    assert len(hits) == 2


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_acl_hides_other_groups_documents_in_every_mode(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    query = "salary bands and pay grades of employees"

    as_engineer = index_backend.search(
        shared, embedded.request(query, mode, limit=len(DOCUMENTS), acl_groups=["eng", "public"])
    )
    as_hr = index_backend.search(shared, embedded.request(query, mode, limit=3, acl_groups=["hr"]))
    as_admin = index_backend.search(shared, embedded.request(query, mode, limit=3, acl_groups=None))

    assert "salaries" not in external_ids(as_engineer)
    assert all(set(hit.payload["acl_groups"]) & {"eng", "public"} for hit in as_engineer)
    assert external_ids(as_hr)[0] == "salaries"
    assert external_ids(as_admin)[0] == "salaries"


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_acl_group_match_is_by_any_shared_group(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    hits = index_backend.search(shared, embedded.request("chess king deploy", mode, limit=20, acl_groups=["eng"]))

    # Only points sharing the group "eng": "deploy" (eng) and "chess" (public + eng); no public-only document.
    assert set(external_ids(hits)) <= {"deploy", "chess"}
    assert "chess" in external_ids(hits)


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_an_empty_group_list_sees_nothing(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    assert index_backend.search(shared, embedded.request("capital of France", mode, acl_groups=[])) == []


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_filters_on_payload_fields(
    index_backend: IndexBackend, shared: str, embedded: Embedded, mode: SearchMode
) -> None:
    query = "capital city planet coffee salary deploy volcano chess bread"

    by_source = index_backend.search(shared, embedded.request(query, mode, limit=20, filters={"source": "intranet"}))
    by_ids = index_backend.search(
        shared, embedded.request(query, mode, limit=20, filters={"external_id": ["paris", "volcano"]})
    )
    by_integer = index_backend.search(shared, embedded.request(query, mode, limit=20, filters={"document_id": 103}))
    combined = index_backend.search(
        shared,
        embedded.request(query, mode, limit=20, filters={"source": "intranet"}, acl_groups=["eng"]),
    )

    assert set(external_ids(by_source)) <= {"salaries", "deploy"}
    assert "deploy" in external_ids(by_source)
    assert set(external_ids(by_ids)) <= {"paris", "volcano"}
    assert by_ids
    assert external_ids(by_integer) == ["espresso"]
    assert external_ids(combined) == ["deploy"]


def test_alias_set_resolve_switch_and_delete(
    index_backend: IndexBackend, names: dict[str, str], filled: str, embedded: Embedded
) -> None:
    alias, second = names["alias"], names["v2"]
    index_backend.create_collection(second, DIMENSION)
    index_backend.upsert(second, [embedded.point("volcano"), embedded.point("chess")])
    index_backend.finalize(second)
    query = embedded.request("What is the capital city of France?", "hybrid", limit=10)

    assert index_backend.resolve_alias(alias) is None
    index_backend.set_alias(alias, filled)
    assert index_backend.resolve_alias(alias) == filled
    assert external_ids(index_backend.search(alias, query))[0] == "paris"

    index_backend.set_alias(alias, second)  # the switch: one atomic step

    assert index_backend.resolve_alias(alias) == second
    assert set(external_ids(index_backend.search(alias, query))) == {"volcano", "chess"}
    assert index_backend.count(filled) == len(DOCUMENTS)  # the old version stays for rollback
    assert index_backend.collection_exists(filled)

    index_backend.delete_alias(alias)

    assert index_backend.resolve_alias(alias) is None
    assert index_backend.collection_exists(second)
    index_backend.delete_alias(alias)  # deleting a missing alias is not an error


def test_alias_to_a_missing_collection_is_refused_and_the_old_target_kept(
    index_backend: IndexBackend, names: dict[str, str], filled: str
) -> None:
    index_backend.set_alias(names["alias"], filled)

    with pytest.raises(KeyError):
        index_backend.set_alias(names["alias"], names["v3"])

    assert index_backend.resolve_alias(names["alias"]) == filled


def test_aliases_are_independent(index_backend: IndexBackend, names: dict[str, str], filled: str) -> None:
    other = names["alias"] + "-other"
    index_backend.create_collection(names["v2"], DIMENSION)
    try:
        index_backend.set_alias(names["alias"], filled)
        index_backend.set_alias(other, names["v2"])
        index_backend.delete_alias(names["alias"])

        assert index_backend.resolve_alias(other) == names["v2"]
    finally:
        index_backend.delete_alias(other)


def test_dropping_a_collection_removes_aliases_to_it(
    index_backend: IndexBackend, names: dict[str, str], filled: str
) -> None:
    """Qdrant deletes a collection's aliases with it; the embedded backend must not keep a dangling alias."""
    index_backend.set_alias(names["alias"], filled)

    index_backend.drop_collection(filled)

    assert index_backend.resolve_alias(names["alias"]) is None


@pytest.mark.parametrize(
    "index_backend",
    [
        "embedded",
        pytest.param(
            "server-url",
            marks=[
                pytest.mark.integration,
                pytest.mark.skipif(not os.environ.get("FERRET_QDRANT_URL"), reason="FERRET_QDRANT_URL is not set"),
            ],
        ),
    ],
    indirect=True,
)
def test_readers_never_see_a_missing_alias_while_it_is_switched(
    index_backend: IndexBackend, names: dict[str, str], filled: str, embedded: Embedded
) -> None:
    """Searches through the alias keep working while another thread switches it back and forth.

    Not run on qdrant-client's local mode: it is a single-threaded test double, not the atomic server.
    """
    alias, second = names["alias"], names["v2"]
    index_backend.create_collection(second, DIMENSION)
    index_backend.upsert(second, embedded.points[:4])
    index_backend.finalize(second)
    index_backend.set_alias(alias, filled)
    request = embedded.request("capital of France", "dense", limit=3)
    errors: list[BaseException] = []
    reads: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                assert index_backend.search(alias, request)
            except BaseException as error:
                errors.append(error)
                return
            reads.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        switches = 0
        while switches < 40 or (len(reads) < 20 and switches < 2000 and reader.is_alive()):
            index_backend.set_alias(alias, second if switches % 2 == 0 else filled)
            switches += 1
        if switches % 2 == 1:
            index_backend.set_alias(alias, filled)
    finally:
        stop.set()
        reader.join(timeout=30)

    assert not errors
    assert reads
    assert index_backend.resolve_alias(alias) == filled


@pytest.mark.parametrize("through_alias", [False, True])
def test_search_batch_equals_one_search_per_query(
    index_backend: IndexBackend, names: dict[str, str], shared: str, embedded: Embedded, through_alias: bool
) -> None:
    target = shared
    if through_alias:
        index_backend.set_alias(names["alias"], shared)
        target = names["alias"]
    requests = [
        embedded.request(query, mode, limit=4, acl_groups=groups)
        for query, _ in QUERIES
        for mode in SEARCH_MODES
        for groups in (None, ["eng", "public"])
    ]

    batched = index_backend.search_batch(target, requests)
    single = [index_backend.search(target, request) for request in requests]

    assert len(batched) == len(requests)
    for got, expected in zip(batched, single, strict=True):
        assert [hit.id for hit in got] == [hit.id for hit in expected]
        np.testing.assert_allclose([hit.score for hit in got], [hit.score for hit in expected], rtol=1e-5)
