"""A sync run names the process running it, so a killed sync no longer holds its source back.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29

Written by hand from ``ferret.core.db.models`` (SyncRun.owner). A sync killed with ``kill -9`` left its run
"running": ``ferret source list`` showed it running and the scheduler skipped the source for six hours. Runs written
before have no owner and keep the six-hour rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch:
        batch.drop_column("owner")
