"""Synthetic queries keep the generator's mean token log-probability, a filter score that costs nothing.

Revision ID: 0019
Revises: 0017
Create Date: 2026-11-23

Written by hand from ``ferret.core.db.models`` (SyntheticQuery.logprob); chained after 0017, which reached main
while this was written (it was planned after 0016). Issue 12 item 5: the sampler already has
the logits, so each query's mean token log-probability is stored with it and the filter can drop the least likely
ones. Rows written before have none (NULL) and are never dropped by that filter.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("synthetic_queries") as batch:
        batch.add_column(sa.Column("logprob", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("synthetic_queries") as batch:
        batch.drop_column("logprob")
