"""Initial schema: pools (lease, cooldowns, pause, tracked count), events, dedup keys.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the three tables as ``autoscaler/store/tables.py`` first defined them."""
    op.create_table(
        "pools",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("tracked_count", sa.Integer, nullable=True),
        sa.Column("count_changed_at", sa.Float, nullable=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("pause_reason", sa.Text, nullable=False),
        sa.Column("last_scale_out_at", sa.Float, nullable=True),
        sa.Column("last_scale_in_at", sa.Float, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("backoff_until", sa.Float, nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("last_event_id", sa.Integer, nullable=True),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("pool", sa.String(64), nullable=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("from_count", sa.Integer, nullable=True),
        sa.Column("to_count", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("alerts", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
    )
    op.create_index("ix_events_pool_id", "events", ["pool", "id"])
    op.create_index("ix_events_time", "events", ["time"])
    op.create_table(
        "dedup",
        sa.Column("key", sa.String(512), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("claim", sa.String(64), nullable=False),
    )
    op.create_index("ix_dedup_expires", "dedup", ["expires_at"])


def downgrade() -> None:
    """Drop everything."""
    op.drop_table("dedup")
    op.drop_index("ix_events_time", "events")
    op.drop_index("ix_events_pool_id", "events")
    op.drop_table("events")
    op.drop_table("pools")
