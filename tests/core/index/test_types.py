"""Values of the index interface that need no backend: point ids and search requests."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from ferret.core.index.types import SearchRequest, SparseVector, point_id


def test_point_ids_are_deterministic() -> None:
    assert point_id(1, 42) == point_id(1, 42)
    assert str(uuid.UUID(point_id(1, 42))) == point_id(1, 42)
    assert len({point_id(1, 42), point_id(2, 42), point_id(1, 43)}) == 3


def test_search_request_needs_the_vectors_of_its_mode() -> None:
    with pytest.raises(ValueError):
        SearchRequest(limit=1, mode="dense")
    with pytest.raises(ValueError):
        SearchRequest(limit=1, mode="hybrid", dense=np.zeros(4, dtype=np.float32))


def test_conditions_put_the_access_filter_after_the_payload_filters() -> None:
    sparse = SparseVector(indices=[1], values=[1.0])
    request = SearchRequest(limit=1, mode="sparse", sparse=sparse, acl_groups=["hr"], filters={"source": "wiki"})
    assert request.conditions() == [("source", "wiki"), ("acl_groups", ["hr"])]
    assert SearchRequest(limit=1, mode="sparse", sparse=sparse).conditions() == []
    # An empty group list must match nothing, not drop the access condition.
    ((key, groups),) = SearchRequest(limit=1, mode="sparse", sparse=sparse, acl_groups=[]).conditions()
    assert key == "acl_groups" and groups and groups != ["public"]
