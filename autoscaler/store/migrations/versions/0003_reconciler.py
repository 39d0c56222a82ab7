"""The reconciler: a process-wide lease table and each pool's stored cloud view.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``leases`` and ``pool_views`` as ``autoscaler/store/tables.py`` defines them."""
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("leases"):
        op.create_table(
            "leases",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("owner", sa.String(128), nullable=False),
            sa.Column("until", sa.Float, nullable=False),
        )
    if not inspector.has_table("pool_views"):
        op.create_table(
            "pool_views",
            sa.Column("pool", sa.String(64), primary_key=True),
            sa.Column("current", sa.Integer, nullable=True),
            sa.Column("busy", sa.Boolean, nullable=False),
            sa.Column("detail", sa.Text, nullable=False),
            sa.Column("in_flight", sa.Integer, nullable=False),
            sa.Column("error", sa.Text, nullable=True),
            sa.Column("read_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("pool_views")
    op.drop_table("leases")
