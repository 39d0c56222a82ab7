"""Node repair: the nodes in repair, shared by replicas and kept across restarts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``repairs`` as ``autoscaler/store/tables.py`` defines it."""
    if not sa.inspect(op.get_bind()).has_table("repairs"):
        op.create_table(
            "repairs",
            sa.Column("pool", sa.String(64), primary_key=True),
            sa.Column("node", sa.String(253), primary_key=True),
            sa.Column("since", sa.Float, nullable=False),
            sa.Column("state", sa.String(32), nullable=False),
            sa.Column("reason", sa.Text, nullable=False, server_default=""),
            sa.Column("replacement", sa.Integer, nullable=True),
            sa.Column("error", sa.Text, nullable=False, server_default=""),
            sa.Column("updated_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("repairs")
