"""Qdrant's distributed mode as settings of the server backend: shard number, replication factor and write
consistency reach every new collection (index version); the embedded store refuses them in one sentence.

No Qdrant server runs here (tests/core/conftest.py skips the server half of the contract without
FERRET_QDRANT_URL), so the creation request is read by a stand-in of Qdrant's documented REST endpoints that
records what qdrant-client sends; with FERRET_QDRANT_URL set, the last test reads the real server's collection.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from ferret.core.index.factory import open_backend
from ferret.core.index.server_backend import QdrantServerBackend
from ferret.core.settings import FerretSettings


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def _answer(self, result: Any) -> None:
        body = json.dumps({"result": result, "status": "ok", "time": 0.0}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.requests.append(("GET", self.path, {}))
        if self.path.endswith("/exists"):
            self._answer({"exists": False})
        else:
            self._answer({"title": "qdrant", "version": "1.19.0"})

    def do_PUT(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.requests.append(("PUT", self.path, json.loads(self.rfile.read(length) or b"{}")))
        self._answer(True if "/index" not in self.path else {"operation_id": 1, "status": "completed"})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    _Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_new_collections_carry_the_cluster_settings(stand_in: str, tmp_path: Any) -> None:
    settings = FerretSettings(
        home=tmp_path,
        qdrant_url=stand_in,
        qdrant_shard_number=6,
        qdrant_replication_factor=2,
        qdrant_write_consistency_factor=2,
    )
    backend = open_backend(settings)
    try:
        assert isinstance(backend, QdrantServerBackend)
        backend.create_collection("docs__v7", 384)
    finally:
        backend.close()
    created = [body for method, path, body in _Recorder.requests if method == "PUT" and "/index" not in path]
    assert len(created) == 1
    assert (created[0]["shard_number"], created[0]["replication_factor"], created[0]["write_consistency_factor"]) == (
        6,
        2,
        2,
    )
    assert created[0]["vectors"]["dense"]["size"] == 384


def test_unset_leaves_the_servers_defaults(stand_in: str, tmp_path: Any) -> None:
    backend = open_backend(FerretSettings(home=tmp_path, qdrant_url=stand_in))
    try:
        backend.create_collection("docs__v1", 384)
    finally:
        backend.close()
    created = [body for method, path, body in _Recorder.requests if method == "PUT" and "/index" not in path]
    assert len(created) == 1 and not {"shard_number", "replication_factor", "write_consistency_factor"} & set(
        created[0]
    )


def test_the_embedded_store_and_impossible_consistency_are_refused(tmp_path: Any) -> None:
    with pytest.raises(ValidationError, match="need FERRET_QDRANT_URL"):
        FerretSettings(home=tmp_path, qdrant_shard_number=2)
    with pytest.raises(ValidationError, match="cannot exceed"):
        FerretSettings(home=tmp_path, qdrant_url="http://qdrant:6333", qdrant_write_consistency_factor=2)


@pytest.mark.skipif(not os.environ.get("FERRET_QDRANT_URL"), reason="FERRET_QDRANT_URL is not set")
def test_a_real_server_creates_the_collection_with_them(tmp_path: Any) -> None:
    url = os.environ["FERRET_QDRANT_URL"]
    backend = open_backend(FerretSettings(home=tmp_path, qdrant_url=url, qdrant_shard_number=2))
    assert isinstance(backend, QdrantServerBackend)
    collection = f"distribution_{uuid.uuid4().hex[:8]}"
    try:
        backend.create_collection(collection, 8)
        assert backend.client.get_collection(collection).config.params.shard_number == 2
    finally:
        backend.drop_collection(collection)
        backend.close()
