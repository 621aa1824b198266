"""Migration 0017 copies the versions and configurations that were once active into the activation history, oldest
first, so the first rollback after the upgrade goes back to the version active before the current one."""

from __future__ import annotations

from sqlalchemy import create_engine, pool, text

from ferret.core.db import migrate

INDEX_VERSIONS = [  # version, state, activated_at
    (1, "ready", "2026-01-01 10:00:00"),
    (2, "active", "2026-01-03 10:00:00"),
    (3, "ready", "2026-01-02 10:00:00"),
    (4, "retired", "2025-12-31 10:00:00"),  # its collection is gone: no rollback target
    (5, "ready", None),  # never active
]


def test_upgrade_copies_earlier_activations_oldest_first(database_url: str) -> None:
    migrate.upgrade(database_url, "0016")
    engine = create_engine(database_url, poolclass=pool.NullPool)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO corpora (id, name, description, max_passage_tokens, passage_overlap_tokens, created_at) "
                "VALUES (1, 'kb', '', 288, 32, '2026-01-01')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO model_versions (id, name, kind, path, dimension, metrics, created_at) "
                "VALUES (1, 'base', 'base', '/m', 384, '{}', '2026-01-01')"
            )
        )
        for version, state, activated_at in INDEX_VERSIONS:
            connection.execute(
                text(
                    "INSERT INTO index_versions (corpus_id, model_version_id, version, collection, backend, state, "
                    "passage_count, point_count, created_at, activated_at) VALUES (1, 1, :version, :collection, "
                    "'edge', :state, 0, 0, '2026-01-01', :activated_at)"
                ),
                {"version": version, "collection": f"kb__v{version}", "state": state, "activated_at": activated_at},
            )

    migrate.upgrade(database_url)

    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT kind, version, actor, via, withdrawn FROM activations ORDER BY id")
        ).all()
    engine.dispose()
    assert [tuple(row) for row in rows] == [
        ("index", 1, "system", "promote", False),
        ("index", 3, "system", "promote", False),
        ("index", 2, "system", "promote", False),
    ]
