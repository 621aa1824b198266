"""Activation history: every promotion and rollback of an index version or a search configuration, per corpus.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-23

Written by hand from ``ferret.core.db.models`` (Activation). Rollback used to pick the most recently activated
version other than the current one, so it toggled between two versions (v2 → v1 → v2); the rows not withdrawn are
now a stack it walks back (v3 → v2 → v1). Existing live versions and configurations that were once active are
copied in, oldest activation first, as the system's, so the first rollback after the upgrade behaves as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    activations = op.create_table(
        "activations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("withdrawn", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id", name="pk_activations"),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name="fk_activations_corpus_id_corpora", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_activations_corpus_id", "activations", ["corpus_id"])
    columns = ["corpus_id", "kind", "version", "activated_at", "actor", "via", "withdrawn"]
    index_versions = sa.table(
        "index_versions", sa.column("corpus_id"), sa.column("version"), sa.column("activated_at"), sa.column("state")
    )
    search_configs = sa.table("search_configs", sa.column("corpus_id"), sa.column("version"), sa.column("activated_at"))
    for kind, table, live in (
        ("index", index_versions, index_versions.c.state.in_(("ready", "active"))),
        ("config", search_configs, sa.true()),
    ):
        # Oldest first: the ids give each corpus's stack its order.
        earlier = (
            sa.select(
                table.c.corpus_id,
                sa.literal(kind),
                table.c.version,
                table.c.activated_at,
                sa.literal("system"),
                sa.literal("promote"),
                sa.false(),
            )
            .where(table.c.activated_at.is_not(None), live)
            .order_by(table.c.activated_at, table.c.version)
        )
        op.execute(activations.insert().from_select(columns, earlier))


def downgrade() -> None:
    op.drop_index("ix_activations_corpus_id", table_name="activations")
    op.drop_table("activations")
