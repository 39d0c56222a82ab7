"""The state store: pools (lease, cooldowns, pause, tracked counts), dedup keys and the event log."""
from __future__ import annotations

from autoscaler.store.base import EventRecord, Store, StoreUnavailable
from autoscaler.store.sql import SqlStore


def open_store(url: str) -> Store:
    """The store for a ``store.url`` (SQLite or PostgreSQL, both through SQLAlchemy)."""
    return SqlStore(url)


__all__ = ["EventRecord", "Store", "StoreUnavailable", "SqlStore", "open_store"]
