"""Alembic environment: always online, on the connection ``autoscaler.store.migrate`` hands over (lock held)."""
from __future__ import annotations

from alembic import context

from autoscaler.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through autoscaler.store.migrate.upgrade(), which holds the migration lock")

context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
