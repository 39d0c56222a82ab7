"""The alerts that asked for a node's repair, and the operator's cancel of it: so that Alertmanager's repeats of a
cancelled alert (same fingerprint and ``startsAt``) start nothing until the alert resolves (issue 46).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``repair_alerts`` as ``autoscaler/store/tables.py`` defines it."""
    if not sa.inspect(op.get_bind()).has_table("repair_alerts"):
        op.create_table(
            "repair_alerts",
            sa.Column("pool", sa.String(64), primary_key=True),
            sa.Column("node", sa.String(253), primary_key=True),
            sa.Column("fingerprint", sa.String(200), primary_key=True),
            sa.Column("starts_at", sa.String(64), primary_key=True),
            sa.Column("seen_at", sa.Float, nullable=False),
            sa.Column("cancelled_at", sa.Float, nullable=True),
        )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("repair_alerts")
