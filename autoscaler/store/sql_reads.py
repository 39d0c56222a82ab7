"""The SQL store's reads of the event log and the stored views, the page's batch reads among them.

A page (``GET /``) reads every pool at once: each read here is one statement whatever the number of pools, so a
page costs the same few statements for 10 pools or 10,000 (issue 34, item 9: one read per page, never one per row).
"""
from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Any, Collection

from sqlalchemy import Connection, func, select, true

from autoscaler.store import tables
from autoscaler.store.base import EventRecord, NodesView, PoolView
from autoscaler.store.rows import event_record, nodes_of


class SqlReads:
    """Mixed into ``SqlStore``: every method is one short read transaction (``_tx``)."""

    def _tx(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # SqlStore's: a short transaction

    def _read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # SqlStore's: one SELECT outside the writer gate

    def events(self, pool: str | None, limit: int, before_id: int | None = None, *,
               outcomes: Collection[str] = (), source: str | None = None) -> list[EventRecord]:
        t = tables.events
        query = select(t).order_by(t.c.id.desc()).limit(limit)
        if pool is not None:
            query = query.where(t.c.pool == pool)
        if before_id is not None:
            query = query.where(t.c.id < before_id)
        if outcomes:
            query = query.where(t.c.outcome.in_(sorted(set(outcomes))))
        if source is not None:
            query = query.where(t.c.source == source)
        with self._tx() as conn:
            return [event_record(r) for r in conn.execute(query).all()]

    def event(self, event_id: int) -> EventRecord | None:
        with self._tx() as conn:
            row = conn.execute(select(tables.events).where(tables.events.c.id == event_id)).first()
        return event_record(row) if row else None

    def recent_events(self, since: float, per_pool: int,
                      pools: Collection[str] | None = None) -> dict[str, list[EventRecord]]:
        out: dict[str, list[EventRecord]] = {}
        if pools is not None and not pools:
            return out
        with self._read() as conn:
            for row in conn.execute(_recent(conn.dialect.name, since, per_pool, pools)).all():
                out.setdefault(row.pool, []).append(event_record(row, alerts=False))
        return out

    def last_events(self) -> dict[str, EventRecord]:
        p, t = tables.pools, tables.events
        query = select(p.c.name.label("pool_name"), t).join(t, t.c.id == p.c.last_event_id)
        with self._read() as conn:
            return {row.pool_name: event_record(row) for row in conn.execute(query).all()}

    def views(self) -> dict[str, PoolView]:
        with self._tx() as conn:
            rows = conn.execute(select(tables.pool_views)).all()
        return {r.pool: PoolView(r.pool, r.current, bool(r.busy), r.detail, int(r.in_flight), r.error,
                                 float(r.read_at)) for r in rows}

    def nodes_view(self, pool: str) -> NodesView | None:
        t = tables.node_views
        with self._tx() as conn:
            row = conn.execute(select(t).where(t.c.pool == pool)).first()
        return _nodes(row) if row else None

    def nodes_views(self) -> dict[str, NodesView]:
        with self._read() as conn:
            rows = conn.execute(select(tables.node_views)).all()
        return {r.pool: _nodes(r) for r in rows}


def _nodes(row: Any) -> NodesView:
    return nodes_of(row.pool, row.nodes, row.error, float(row.read_at))


def _recent(dialect: str, since: float, per_pool: int, pools: Collection[str] | None) -> Any:
    """Each pool's ``per_pool`` newest events, those at or after ``since``: one index range of ix_events_pool_id per
    pool, so the work grows with pools x per_pool, never with the events the window holds (ranking every one of
    them with a window function took seconds at 100,000 events: issue 45, item 11). ``pools``: only these."""
    p, t = tables.pools, tables.events
    named = p.c.name.in_(sorted(pools)) if pools is not None else true()
    charted = [c for c in t.c if c.name != "alerts"]  # a chart never reads them; decoding them cost as much as
    # the details at 100,000 events
    if dialect == "postgresql":  # a LATERAL join: for each pool, a backward index scan stopped at per_pool rows.
        # The pool as a range of one, ordered by (pool, id): only ix_events_pool_id gives that order. With
        # ``pool = name`` the planner, costing every pool as the average one, walked the primary key backwards and
        # filtered by pool: through the whole table for a pool whose events are old.
        newest = select(*charted).where(t.c.pool >= p.c.name, t.c.pool <= p.c.name) \
            .order_by(t.c.pool.desc(), t.c.id.desc()).limit(per_pool).lateral("newest")
        return select(newest).select_from(p).join(newest, true()).where(named, newest.c.time >= since) \
            .order_by(newest.c.pool, newest.c.id.desc())
    # SQLite has no LATERAL: each pool's per_pool-th newest id (per_pool index entries read) bounds its range.
    # MATERIALIZED (SQLite 3.35+) makes the pools drive the join; as a plain subquery SQLite walked the window's
    # events and ran the bound for each of them.
    x = t.alias("x")
    floor = select(x.c.id).where(x.c.pool == p.c.name).order_by(x.c.id.desc()).limit(1).offset(per_pool - 1) \
        .scalar_subquery()
    bounds = select(p.c.name.label("bound_pool"), func.coalesce(floor, 0).label("floor")).where(named).cte("bounds")
    if sqlite3.sqlite_version_info >= (3, 35):  # older: the same rows, the slower plan
        bounds = bounds.prefix_with("MATERIALIZED")
    kept = (t.c.pool == bounds.c.bound_pool) & (t.c.id >= bounds.c.floor)
    return select(*charted).select_from(bounds).join(t, kept).where(t.c.time >= since) \
        .order_by(t.c.pool, t.c.id.desc())
