"""Jobs keep their first stage's input, so any process can run (or run again) a job from its row.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-23

Written by hand from ``ferret.core.db.models`` (Job.payload). A CLI command started with ``--async`` and no broker
hands its job to a detached runner process that reads the payload from the row; ``ferret jobs retry`` runs a failed
job again from it. Existing jobs have none (NULL) and cannot be retried that way.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("payload", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("payload")
