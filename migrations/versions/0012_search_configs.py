"""Search configurations, the unit of promotion (issue 12): retriever + fusion + optional reranker, versioned.

Revision ID: 0012
Revises: 0014
Create Date: 2026-11-22

Written by hand from ``ferret.core.db.models.SearchConfig``, with the naming convention of 0001. Models are
referenced with ``ON DELETE SET NULL`` and by name, so a deleted model leaves a configuration that says which model
it lost instead of disappearing with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "search_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("retriever_id", sa.Integer(), nullable=True),
        sa.Column("retriever_name", sa.String(128), nullable=False),
        sa.Column("fusion", sa.JSON(), nullable=False),
        sa.Column("reranker_id", sa.Integer(), nullable=True),
        sa.Column("reranker_name", sa.String(128), nullable=True),
        sa.Column("rerank_depth", sa.Integer(), nullable=False),
        sa.Column("rerank_weight", sa.Double(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_search_configs"),
        sa.UniqueConstraint("corpus_id", "version", name="uq_search_configs_corpus_id_version"),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name="fk_search_configs_corpus_id_corpora", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["retriever_id"],
            ["model_versions.id"],
            name="fk_search_configs_retriever_id_model_versions",
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["reranker_id"],
            ["model_versions.id"],
            name="fk_search_configs_reranker_id_model_versions",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_search_configs_corpus_id", "search_configs", ["corpus_id"])


def downgrade() -> None:
    op.drop_table("search_configs")
