"""Each node-aware pool's stored node view (the reconciler lists the nodes; pages and the API read them).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``node_views`` as ``autoscaler/store/tables.py`` defines it."""
    if not sa.inspect(op.get_bind()).has_table("node_views"):
        op.create_table(
            "node_views",
            sa.Column("pool", sa.String(64), primary_key=True),
            sa.Column("nodes", sa.Text, nullable=False),
            sa.Column("error", sa.Text, nullable=True),
            sa.Column("read_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("node_views")
