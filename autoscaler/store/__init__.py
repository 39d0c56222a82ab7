"""The state store: pools (lease, cooldowns, pause, tracked counts), dedup keys and the event log."""
from __future__ import annotations

from autoscaler.store.base import (DedupConfirm, EventRecord, NodesView, PoolChange, PoolView, QuickState,
                                   RemovalIntent, RepairAlert, RepairMark, RepairRecord, Shortcut, StoreUnavailable)
from autoscaler.store.interfaces import (DedupStore, EventStore, PoolStore, RemovalStore, RepairStore, Store,
                                         ViewStore)
from autoscaler.store.connections import StoreOptions
from autoscaler.store.sql import SqlStore


def open_store(url: str, options: StoreOptions | None = None) -> Store:
    """The store for a ``store.url`` (SQLite or PostgreSQL, both through SQLAlchemy), migrated to the newest schema."""
    return SqlStore(url, options)


__all__ = ["DedupConfirm", "DedupStore", "EventRecord", "EventStore", "NodesView", "PoolChange", "PoolStore",
           "PoolView", "QuickState", "RemovalIntent", "RemovalStore", "RepairAlert", "RepairMark", "RepairRecord",
           "RepairStore", "Shortcut", "Store", "StoreOptions", "StoreUnavailable", "SqlStore", "ViewStore",
           "open_store"]
