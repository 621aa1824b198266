"""Handles of the embedded backend on one folder share this process's loaded shards (Qdrant Edge lets one holder
load a shard), and the last one to close lets go of them so another process can load them."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ferret.core.errors import UnavailableError
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.types import IndexPoint, SearchRequest, SparseVector, point_id

DIMENSION = 8


def _points(count: int) -> list[IndexPoint]:
    rng = np.random.default_rng(7)
    return [
        IndexPoint(
            id=point_id(1, i),
            dense=rng.normal(size=DIMENSION).astype(np.float32),
            sparse=SparseVector(indices=[i + 1], values=[1.0]),
            payload={"external_id": f"doc-{i}", "acl_groups": ["public"]},
        )
        for i in range(count)
    ]


def _count_in_another_process(root: Path, collection: str) -> str:
    code = (
        "import sys; from pathlib import Path; from ferret.core.index.edge_backend import EdgeIndexBackend; "
        "b = EdgeIndexBackend(Path(sys.argv[1])); print(b.count(sys.argv[2])); b.close()"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root), collection], capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def test_two_handles_of_one_process_share_the_loaded_shards(tmp_path: Path) -> None:
    writer, reader = EdgeIndexBackend(tmp_path), EdgeIndexBackend(tmp_path)
    writer.create_collection("c", DIMENSION)
    writer.upsert("c", _points(5))
    assert reader.count("c") == 5  # loading it a second time failed with WouldBlock
    request = SearchRequest(limit=3, mode="dense", dense=_points(1)[0].dense)
    assert reader.search("c", request)[0].payload["external_id"] == "doc-0"

    writer.close()
    writer.close()  # idempotent: the second close must not take the reader's share with it
    assert reader.count("c") == 5
    assert "open in another Ferret process" in _count_in_another_process(tmp_path, "c")

    reader.close()
    assert _count_in_another_process(tmp_path, "c") == "5"  # the last handle let go of the shard


def test_a_handle_used_again_after_close_joins_the_others(tmp_path: Path) -> None:
    first, second = EdgeIndexBackend(tmp_path), EdgeIndexBackend(tmp_path)
    first.create_collection("c", DIMENSION)
    first.upsert("c", _points(3))
    first.close()  # let go, as the quickstart does before a job ...
    assert first.count("c") == 3  # ... and loaded again at its next search, shared with `second`
    assert second.count("c") == 3
    first.close()
    second.close()
    assert _count_in_another_process(tmp_path, "c") == "3"


def test_a_handle_nobody_closed_lets_go_when_it_is_collected(tmp_path: Path) -> None:
    """Code that drops a handle without closing it freed its shards with it; sharing must not keep them loaded."""
    handle = EdgeIndexBackend(tmp_path)
    handle.create_collection("c", DIMENSION)
    handle.upsert("c", _points(2))
    del handle
    gc.collect()
    assert _count_in_another_process(tmp_path, "c") == "2"


def test_a_collection_another_process_has_open_is_not_dropped(tmp_path: Path) -> None:
    """Deleting its files under a server that has it loaded left the server serving them from memory."""
    maker = EdgeIndexBackend(tmp_path)
    maker.create_collection("c", DIMENSION)
    maker.upsert("c", _points(3))
    maker.close()
    code = (
        "import sys; from pathlib import Path; from ferret.core.index.edge_backend import EdgeIndexBackend; "
        "b = EdgeIndexBackend(Path(sys.argv[1])); print(b.count('c'), flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "3"  # it holds the shard now
        backend = EdgeIndexBackend(tmp_path)
        with pytest.raises(UnavailableError, match="open in another Ferret process"):
            backend.drop_collection("c")
        assert "c" in backend.list_collections()
    finally:
        holder.communicate("", timeout=60)  # end of input: it exits and lets go
    backend.drop_collection("c")
    assert backend.list_collections() == []
