"""Hardening: documents the index refused (quarantine) and an audit trail of key and index changes.

Revision ID: 0015
Revises: 0012
Create Date: 2026-11-22

Written by hand from ``ferret.core.db.models`` (Document.quarantine_reason, AuditEvent, GenerationRun.owner), with
the naming convention of 0001. Existing documents are not quarantined (NULL); the audit trail starts empty; existing
runs have no owner.

- ``documents.quarantine_reason`` says why a document never reaches a shard (beyond the payload limits, or
  refused by the index); builds and ingests leave such documents out, and the push API can still delete them.
- ``generation_runs.owner`` is ``<host>:<pid>`` of the process generating, so a run left ``running`` by a killed
  process is marked interrupted at the next start on that host (as orphaned embedded jobs are).
- ``audit_events`` records who created or revoked API keys and who promoted or rolled back index versions.
  The new ``owner`` API key scope needs no schema change (scopes are a JSON list).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=True))
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    with op.batch_alter_table("generation_runs") as batch:
        batch.add_column(sa.Column("owner", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:
        batch.drop_column("owner")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_table("audit_events")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("quarantine_reason")
