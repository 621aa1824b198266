"""A push job's batch embedded ahead in one encoder call (issue 16, item 2): ``PushIngestor.texts_to_embed`` lists
exactly the passages a push would embed (not those of unchanged documents), ``VersionedCollection.
prefetch_embeddings`` encodes them once, and the pushes of the slices that follow encode nothing more yet index the
same vectors a plain push would; a passage that was not prefetched is still encoded by the push that stores it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferret.core.corpus.chunking import passage_text
from ferret.core.corpus.push import PushedDocument, PushIngestor
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.migrate import upgrade
from ferret.core.encoder.registry import ModelRegistry, load_encoder
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.types import SearchRequest
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.documents import Document

pytestmark = pytest.mark.slow

TOPICS = ["glacier moraines", "espresso extraction", "parental leave", "blue-green deployments", "plate tectonics"]


def pushed(i: int, topic: str) -> PushedDocument:
    return PushedDocument(Document(external_id=f"d{i}", title=f"On {topic}", text=f"Note {i} about {topic}."))


def test_a_prefetched_batch_is_encoded_once_and_indexed_as_a_plain_push_would(tmp_path: Path) -> None:
    settings = FerretSettings(home=tmp_path, qdrant_url=None)
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    try:
        with session_scope(settings.database_url) as session:
            corpus = create_corpus(session, "kb")
            seed = pushed(0, TOPICS[0])
            PushIngestor(session, settings, backend, corpus).push("push", [seed])
            versions = VersionedCollection(session, settings, backend, corpus)
            model = ModelRegistry(session, settings).ensure_base()
            active = versions.promote(versions.build(model))
            batch = [seed] + [pushed(i, TOPICS[i % len(TOPICS)]) for i in range(1, 41)]
            encoder = load_encoder(model.path, settings)

            ingestor = PushIngestor(session, settings, backend, corpus)
            texts = ingestor.texts_to_embed("push", batch)
            assert texts == [passage_text(d.document.title, d.document.text) for d in batch[1:]]  # seed unchanged
            before = encoder.calls
            ingestor.versions.prefetch_embeddings(texts)
            assert encoder.calls == before + 1
            for start in range(0, len(batch), 16):  # the push job's slices
                ingestor.push("push", batch[start : start + 16])
            assert encoder.calls == before + 1, "the slices encoded passages that were prefetched"

            late = pushed(41, "reciprocal rank fusion")
            ingestor.push("push", [late])
            assert encoder.calls == before + 2  # not prefetched: encoded by its own push

            assert backend.count(active.collection) == 42
            for document in (batch[7], batch[40], late):
                text = passage_text(document.document.title, document.document.text)
                vector = encoder.encode_passages([text])[0]
                request = SearchRequest(mode="dense", limit=1, dense=vector, acl_groups=["public"])
                (hit,) = backend.search(active.collection, request)
                assert hit.payload["external_id"] == document.document.external_id
                assert hit.score == pytest.approx(float(np.dot(vector, vector)), abs=1e-4)
    finally:
        backend.close()
