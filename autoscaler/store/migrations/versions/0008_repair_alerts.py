"""The alerts that asked for a node's repair, and the operator's cancel of it: so that Alertmanager's repeats of a
cancelled alert (same fingerprint and ``startsAt``) start nothing until the alert resolves; and the pods a repair
evicted, for its ``repaired`` event (issue 46).

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
    """Create ``repair_alerts`` and ``repairs.evicted`` as ``autoscaler/store/tables.py`` defines them."""
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
    inspector = sa.inspect(op.get_bind())  # one build labelled 0006 had no repairs: the schema repair makes it
    if inspector.has_table("repairs") and "evicted" not in {c["name"] for c in inspector.get_columns("repairs")}:
        op.add_column("repairs", sa.Column("evicted", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("repairs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("evicted")
    op.drop_table("repair_alerts")
