"""Initial schema: corpora, sources, documents, passages, model versions, index versions and jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Written by hand from ``ferret.core.db.models``; ``tests/db/test_migrations.py`` checks that a database
upgraded to head matches the models exactly, on SQLite and on PostgreSQL.

Constraints carry explicit names (Alembic's recommended convention: ``pk_<table>``, ``uq_<table>_<columns>``,
``fk_<table>_<column>_<referred table>``) so that a later migration can drop them by name on both databases,
SQLite batch mode included. The enum CHECK constraints keep the names the models give them. Enum values are
written out here, not imported, so that this revision stays what it was when the models change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX_STATES = ("building", "ready", "active", "retired", "failed")
JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "corpora",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("max_passage_tokens", sa.Integer(), nullable=False),
        sa.Column("passage_overlap_tokens", sa.Integer(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_corpora"),
        sa.UniqueConstraint("name", name="uq_corpora_name"),
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("training_config", sa.JSON(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_model_versions"),
        sa.UniqueConstraint("name", name="uq_model_versions_name"),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["model_versions.id"], name="fk_model_versions_parent_id_model_versions"
        ),
    )
    op.create_table(
        "sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        _timestamp("last_run_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sources"),
        sa.UniqueConstraint("corpus_id", "name", name="uq_sources_corpus_id_name"),
        sa.ForeignKeyConstraint(["corpus_id"], ["corpora.id"], name="fk_sources_corpus_id_corpora", ondelete="CASCADE"),
    )
    op.create_table(
        "documents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("external_id", sa.String(1024), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("acl_groups", sa.JSON(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.UniqueConstraint("corpus_id", "source", "external_id", name="uq_documents_corpus_id_source_external_id"),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name="fk_documents_corpus_id_corpora", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_documents_corpus_id", "documents", ["corpus_id"])
    op.create_table(
        "passages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_passages"),
        sa.UniqueConstraint("document_id", "ordinal", name="uq_passages_document_id_ordinal"),
        sa.ForeignKeyConstraint(
            ["document_id"], ["documents.id"], name="fk_passages_document_id_documents", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name="fk_passages_corpus_id_corpora", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_passages_corpus", "passages", ["corpus_id"])
    op.create_table(
        "index_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("model_version_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("collection", sa.String(256), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("passage_count", sa.Integer(), nullable=False),
        sa.Column("point_count", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("ready_at", nullable=True),
        _timestamp("activated_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_index_versions"),
        sa.UniqueConstraint("corpus_id", "version", name="uq_index_versions_corpus_id_version"),
        sa.UniqueConstraint("collection", name="uq_index_versions_collection"),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name="fk_index_versions_corpus_id_corpora", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["model_version_id"],
            ["model_versions.id"],
            name="fk_index_versions_model_version_id_model_versions",
        ),
        sa.CheckConstraint(_one_of("state", INDEX_STATES), name="index_state"),
    )
    op.create_index("ix_index_versions_corpus_id", "index_versions", ["corpus_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(64), nullable=False),
        sa.Column("progress", sa.Double(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.ForeignKeyConstraint(["corpus_id"], ["corpora.id"], name="fk_jobs_corpus_id_corpora", ondelete="SET NULL"),
        sa.CheckConstraint(_one_of("state", JOB_STATES), name="job_state"),
    )


def downgrade() -> None:
    # Children before parents; dropping a table drops its indexes and constraints.
    for table in ("jobs", "index_versions", "passages", "documents", "sources", "model_versions", "corpora"):
        op.drop_table(table)
