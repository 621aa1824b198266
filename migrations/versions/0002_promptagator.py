"""Promptagator: retrieval tasks, their few-shot examples, generation runs and synthetic queries.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28

Written by hand from ``ferret.core.db.models`` (RetrievalTask, TaskExample, GenerationRun, SyntheticQuery), with
the naming convention of 0001: ``pk_<table>``, ``uq_<table>_<columns>``, ``fk_<table>_<column>_<referred table>``;
the enum CHECK constraints keep the names the models give them. Enum values are written out here, not imported.

A task example keeps ``source`` and ``external_id`` beside its ``document_id`` (SET NULL): re-ingesting a changed
document replaces its row, and the example must find the new one rather than vanish.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENERATION_STATES = ("running", "succeeded", "failed", "interrupted")
QUERY_STATUSES = ("ok", "failed", "dropped")


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("e_doc", sa.String(64), nullable=False),
        sa.Column("e_query", sa.String(64), nullable=False),
        sa.Column("zero_shot", sa.Boolean(), nullable=False),
        sa.Column("generation", sa.JSON(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
        sa.UniqueConstraint("name", name="uq_tasks_name"),
        sa.ForeignKeyConstraint(["corpus_id"], ["corpora.id"], name="fk_tasks_corpus_id_corpora", ondelete="CASCADE"),
    )
    op.create_index("ix_tasks_corpus_id", "tasks", ["corpus_id"])
    op.create_table(
        "task_examples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.String(256), nullable=True),
        sa.Column("external_id", sa.String(1024), nullable=True),
        sa.Column("document_text", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_task_examples"),
        sa.UniqueConstraint("task_id", "position", name="uq_task_examples_task_id_position"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_task_examples_task_id_tasks", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["document_id"], ["documents.id"], name="fk_task_examples_document_id_documents", ondelete="SET NULL"
        ),
    )
    op.create_index("ix_task_examples_document_id", "task_examples", ["document_id"])
    op.create_table(
        "generation_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("counters", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("started_at"),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_generation_runs"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name="fk_generation_runs_task_id_tasks", ondelete="CASCADE"),
        sa.CheckConstraint(_one_of("state", GENERATION_STATES), name="generation_state"),
    )
    op.create_index("ix_generation_runs_task_id", "generation_runs", ["task_id"])
    op.create_table(
        "synthetic_queries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(128), nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_synthetic_queries"),
        sa.UniqueConstraint("run_id", "document_id", "sample", name="uq_synthetic_queries_run_id_document_id_sample"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["generation_runs.id"], name="fk_synthetic_queries_run_id_generation_runs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["document_id"], ["documents.id"], name="fk_synthetic_queries_document_id_documents", ondelete="CASCADE"
        ),
        sa.CheckConstraint(_one_of("status", QUERY_STATUSES), name="query_status"),
    )
    op.create_index("ix_synthetic_queries_document_id", "synthetic_queries", ["document_id"])


def downgrade() -> None:
    # Children before parents; dropping a table drops its indexes and constraints.
    for table in ("synthetic_queries", "generation_runs", "task_examples", "tasks"):
        op.drop_table(table)
