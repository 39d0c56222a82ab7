"""A node removal about to be sent: recorded before the cloud call, so that a worker killed during it does not
leave the node open to new work while the cloud deletes it (the next decision keeps it cordoned until the cloud's
view settles it).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``removal_intents`` as ``autoscaler/store/tables.py`` defines it."""
    if not sa.inspect(op.get_bind()).has_table("removal_intents"):
        op.create_table(
            "removal_intents",
            sa.Column("pool", sa.String(64), primary_key=True),
            sa.Column("node", sa.String(253), primary_key=True),
            sa.Column("owner", sa.String(128), nullable=False),
            sa.Column("at", sa.Float, nullable=False),
            sa.Column("from_count", sa.Integer, nullable=False),
        )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("removal_intents")
