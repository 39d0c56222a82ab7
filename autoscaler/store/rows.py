"""Rows of ``tables`` as the store's types, by column name: the column lists, events and pool states, dedup keys
(their claims: ``expiry.py``).

Everything is derived from ``tables``; nothing is positional.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from autoscaler.models import PoolState
from autoscaler.storable import MAX_TEXT, clean
from autoscaler.store import tables
from autoscaler.store.base import EventRecord, NodesView

#: The pool row's columns that make a PoolState (everything but the lease), by name.
STATE_COLUMNS = tuple(c.name for c in tables.pools.c if c.name not in ("lease_owner", "lease_until"))
#: The events table's columns an insert writes (all but the generated id).
EVENT_COLUMNS = tuple(c.name for c in tables.events.c if not c.primary_key)
#: EventRecord's attribute for each events column whose name differs.
_EVENT_ATTRS = {"from_count": "from_", "to_count": "to"}
_JSON_COLUMNS = ("alerts", "details")
#: Each table's text columns' widths (None: unbounded ``Text``), for ``storable``.
_WIDTHS = {t.name: {c.name: getattr(c.type, "length", None) for c in t.c} for t in tables.metadata.sorted_tables}


def storable(table: Any, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with every text cleaned and bounded to its column's width (``autoscaler.storable``): the same rule on
    SQLite and PostgreSQL, so no content can make a write fail (JSON columns are ASCII once serialised)."""
    widths = _WIDTHS[table.name]
    return {name: clean(value, widths[name] or MAX_TEXT) if isinstance(value, str) else value
            for name, value in row.items()}


def event_row(ev: EventRecord) -> dict[str, Any]:
    """An event as the events table's columns, by name (JSON columns serialised, texts storable)."""
    row = storable(tables.events, {c: getattr(ev, _EVENT_ATTRS.get(c, c)) for c in EVENT_COLUMNS
                                   if c not in _JSON_COLUMNS})
    for column in _JSON_COLUMNS:
        row[column] = json.dumps(getattr(ev, column), default=str)  # ensure_ascii: no NUL, no surrogate left
    return row


#: (column, EventRecord attribute) of the events columns read as they are stored.
_EVENT_PLAIN = tuple((c, _EVENT_ATTRS.get(c, c)) for c in EVENT_COLUMNS if c not in _JSON_COLUMNS)


def event_record(row: Any, alerts: bool = True) -> EventRecord:
    """An events row (a result row, or any mapping) as an EventRecord; ``alerts=False``: a row read without them.
    Read through the row's mapping: a page reads tens of thousands, and a Row's lookup by attribute cost twice as
    much."""
    values = getattr(row, "_mapping", row)
    return EventRecord(id=values["id"], alerts=json.loads(values["alerts"] or "[]") if alerts else [],
                       details=json.loads(values["details"] or "{}"),
                       **{attr: values[column] for column, attr in _EVENT_PLAIN})


def pool_state(values: Any) -> PoolState:
    """A PoolState from the pool row's columns (any mapping), by name."""
    return PoolState(**{c: values[c] for c in STATE_COLUMNS} | {"paused": bool(values["paused"])})


def hash_key(key: str) -> str:
    """A dedup key as stored: long keys, and keys with a character the database cannot hold, hashed."""
    if len(key) <= 200 and clean(key, None) == key:
        return key
    return "sha256:" + hashlib.sha256(key.encode(errors="surrogatepass")).hexdigest()


def nodes_json(view: NodesView) -> str:
    """A node view's ``nodes`` column: the node bodies (a JSON list), or with the pool's GPU counts or its DRA
    state, an object ``{"nodes": [...], "gpus": {...}, "dra": "...", "dra_reason": "..."}`` (no migration: rows
    written before hold the list)."""
    if view.gpus is None and not view.dra and view.failing_since is None:
        return json.dumps(view.nodes)
    return json.dumps({"nodes": view.nodes, "gpus": view.gpus, "dra": view.dra, "dra_reason": view.dra_reason,
                       "failing_since": view.failing_since})


def nodes_of(pool: str, text_: str | None, error: str | None, read_at: float) -> NodesView:
    """A node view from its row (either shape of ``nodes_json``)."""
    data = json.loads(text_ or "[]")
    if isinstance(data, list):
        return NodesView(pool, data, error, read_at)
    return NodesView(pool, list(data.get("nodes") or []), error, read_at, data.get("gpus"), str(data.get("dra") or ""),
                     str(data.get("dra_reason") or ""), data.get("failing_since"))
