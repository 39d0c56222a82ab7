"""All-or-nothing scale-outs in flight (issue 48): a worker restart carries each on or rolls it back.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``gangs`` as ``autoscaler/store/tables.py`` defines it."""
    if sa.inspect(op.get_bind()).has_table("gangs"):
        return
    op.create_table(
        "gangs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("grp", sa.String(64), nullable=False, server_default=""),
        sa.Column("request", sa.String(320), nullable=False, server_default=""),
        sa.Column("before", sa.Integer, nullable=False),
        sa.Column("asked", sa.Integer, nullable=False),
        sa.Column("known", sa.Text, nullable=False, server_default="[]"),
        sa.Column("started", sa.Float, nullable=False),
        sa.Column("deadline", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tried", sa.Text, nullable=False, server_default=""),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False, server_default="[]"),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("gangs")
