"""Workers and HTTP API: API keys (hashed, scoped, with ACL groups), job bookkeeping for Celery, document versions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21

Written by hand from ``ferret.core.db.models`` (ApiKey; new columns of Job and Document), with the naming
convention of 0001. Existing job rows get ``attempts`` 0 and ``cancel_requested`` false.

- ``api_keys.key_hash`` is a SHA-256 of the whole key (keys are 256-bit random, so no salt or slow hash is needed);
  ``prefix`` is the key's public first characters, shown in listings and used to find the row.
- ``jobs.celery_id`` is the id of the Celery task (or chain) running the job; ``cancel_requested`` is the flag a
  running task polls; ``attempts`` counts deliveries, so a redelivered task is visible.
- ``documents.version`` is the source's own version string for the push API: an upsert with the same version is a
  no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("acl_groups", sa.JSON(), nullable=False),
        _timestamp("created_at"),
        _timestamp("last_used_at", nullable=True),
        _timestamp("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("name", name="uq_api_keys_name"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("celery_id", sa.String(255), nullable=True))
        batch.add_column(sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("result", sa.JSON(), nullable=True))
        batch.add_column(_timestamp("updated_at", nullable=True))
    op.create_index("ix_jobs_state", "jobs", ["state"])
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("version", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("version")
    op.drop_index("ix_jobs_state", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in ("updated_at", "result", "attempts", "cancel_requested", "celery_id"):
            batch.drop_column(column)
    op.drop_index("ix_api_keys_prefix", table_name="api_keys")
    op.drop_table("api_keys")
