"""Migration 0014 recomputes stored content hashes without the ACL groups, so the first sync after the upgrade
re-embeds nothing (the hash must equal what a connector's document computes now)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sqlalchemy import create_engine, pool, text

from ferret.core.db import migrate
from ferret.core.sources.documents import Document as SourceDocument


def test_upgrade_recomputes_content_hashes_without_acl_groups(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0003")
    old_hash = hashlib.sha256(json.dumps(["T", "Body", ["hr"], {"k": 1}], sort_keys=True).encode()).hexdigest()
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO corpora (id, name, description, max_passage_tokens, passage_overlap_tokens, created_at) "
                "VALUES (1, 'c', '', 288, 32, '2026-01-01')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO documents (id, corpus_id, source, external_id, title, body, metadata, acl_groups, "
                "content_hash, created_at, updated_at) VALUES (1, 1, 's', 'x', 'T', 'Body', '{\"k\": 1}', '[\"hr\"]', "
                ":hash, '2026-01-01', '2026-01-01')"
            ),
            {"hash": old_hash},
        )

    migrate.upgrade(url)

    with engine.connect() as connection:
        stored = connection.execute(text("SELECT content_hash FROM documents")).scalar_one()
    engine.dispose()
    now = SourceDocument(external_id="x", title="T", text="Body", metadata={"k": 1}, acl_groups=["other"])
    assert stored == now.content_hash != old_hash
