"""Document expansion as an index version: what a version appended to its BM25 vectors, and configurations that
search such a version.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02

Written by hand from ``ferret.core.db.models`` (IndexVersion.expansion, SearchConfig.index_version_id). Issue 12,
item 6: the kept synthetic queries of a document are appended to its passages' sparse vectors in a new index version
of the same retriever, and a search configuration names that version. Rows written before are plain builds (NULL)
and configurations that search their retriever's plain index (NULL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("index_versions") as batch:
        batch.add_column(sa.Column("expansion", sa.JSON(), nullable=True))
    with op.batch_alter_table("search_configs") as batch:
        batch.add_column(sa.Column("index_version_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_search_configs_index_version_id_index_versions", "index_versions", ["index_version_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("search_configs") as batch:
        batch.drop_constraint("fk_search_configs_index_version_id_index_versions", type_="foreignkey")
        batch.drop_column("index_version_id")
    with op.batch_alter_table("index_versions") as batch:
        batch.drop_column("expansion")
