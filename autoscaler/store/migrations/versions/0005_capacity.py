"""Capacity: when a pool could not deliver, it is passed over by its group until ``short_until``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``pools.short_until`` and ``pools.short_reason`` (unless create_all made them)."""
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("pools")}
    with op.batch_alter_table("pools") as batch:
        if "short_until" not in have:
            batch.add_column(sa.Column("short_until", sa.Float, nullable=True))
        if "short_reason" not in have:
            batch.add_column(sa.Column("short_reason", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    """Drop both columns."""
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("short_reason")
        batch.drop_column("short_until")
