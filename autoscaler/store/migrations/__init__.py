"""Alembic migrations of the store; run by ``autoscaler.store.migrate``, no alembic.ini needed."""
