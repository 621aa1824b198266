"""Configured, scheduled and observed sources: sync runs, group memberships, permissions apart from content.

Revision ID: 0014
Revises: 0003
Create Date: 2026-11-22

Written by hand from ``ferret.core.db.models`` (SyncRun, GroupMember; new columns of Source and Document), with the
naming convention of 0001.

- ``sources.enabled`` / ``schedule_minutes`` / ``created_at``: a source is synced on a schedule (Celery beat or the
  embedded scheduler) when enabled; existing sources are enabled and unscheduled.
- ``sync_runs``: one row per sync with its report (counts, skipped items with reasons, error, start and end).
- ``group_members``: memberships a connector reported (``member`` belongs to ``group_principal``), so API keys naming
  a user resolve to that user's external groups.
- ``documents.source_updated_at``: the source's modification time; a push carrying an older one is ignored.
- ``documents.content_hash`` no longer covers the ACL groups (permissions are compared on their own, so a
  permission change no longer re-embeds). The upgrade recomputes every stored hash the new way, so the first sync
  after it does not re-embed the whole corpus; the downgrade leaves the hashes (the old code then re-embeds
  documents once, which is harmless).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SYNC_STATES = ("running", "succeeded", "failed")


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _content_hash(title: str, body: str, metadata: object) -> str:
    # Must equal ferret's Document.content_hash (title, text, metadata; ACL groups left out).
    blob = json.dumps([title, body, metadata], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch.add_column(sa.Column("schedule_minutes", sa.Integer(), nullable=True))
        batch.add_column(_timestamp("created_at", nullable=True))
    with op.batch_alter_table("documents") as batch:
        batch.add_column(_timestamp("source_updated_at", nullable=True))
    op.create_table(
        "sync_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.Enum(*SYNC_STATES, name="sync_state", native_enum=False, length=16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("skipped", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("started_at"),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sync_runs"),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name="fk_sync_runs_source_id_sources", ondelete="CASCADE"
        ),
        sa.CheckConstraint("state IN ('running', 'succeeded', 'failed')", name="sync_state"),
    )
    op.create_index("ix_sync_runs_source_id", "sync_runs", ["source_id"])
    op.create_table(
        "group_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("group_principal", sa.String(256), nullable=False),
        sa.Column("member", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_group_members"),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name="fk_group_members_source_id_sources", ondelete="CASCADE"
        ),
        sa.UniqueConstraint(
            "source_id", "group_principal", "member", name="uq_group_members_source_id_group_principal_member"
        ),
    )
    op.create_index("ix_group_members_member", "group_members", ["member"])

    documents = sa.table(
        "documents",
        sa.column("id", sa.Integer()),
        sa.column("title", sa.Text()),
        sa.column("body", sa.Text()),
        sa.column("metadata", sa.JSON()),
        sa.column("content_hash", sa.String(64)),
    )
    connection = op.get_bind()
    last_id = 0
    while True:
        rows = connection.execute(
            sa.select(documents.c.id, documents.c.title, documents.c.body, documents.c.metadata)
            .where(documents.c.id > last_id)
            .order_by(documents.c.id)
            .limit(1000)
        ).all()
        if not rows:
            break
        for document_id, title, body, metadata in rows:
            connection.execute(
                documents.update()
                .where(documents.c.id == document_id)
                .values(content_hash=_content_hash(title, body, metadata))
            )
        last_id = rows[-1][0]


def downgrade() -> None:
    op.drop_index("ix_group_members_member", table_name="group_members")
    op.drop_table("group_members")
    op.drop_index("ix_sync_runs_source_id", table_name="sync_runs")
    op.drop_table("sync_runs")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("source_updated_at")
    with op.batch_alter_table("sources") as batch:
        for column in ("created_at", "schedule_minutes", "enabled"):
            batch.drop_column(column)
