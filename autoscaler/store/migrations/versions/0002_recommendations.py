"""Proportional mode: recent recommendations per pool, for the scale-in stabilization window.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``recommendations`` as ``autoscaler/store/tables.py`` defines it (unless create_all made it)."""
    if sa.inspect(op.get_bind()).has_table("recommendations"):
        return
    op.create_table(
        "recommendations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("desired", sa.Integer, nullable=False),
    )
    op.create_index("ix_recommendations_pool_time", "recommendations", ["pool", "time"])


def downgrade() -> None:
    """Drop the table."""
    op.drop_index("ix_recommendations_pool_time", table_name="recommendations")
    op.drop_table("recommendations")
