"""The ``repairs`` table on SQLAlchemy: the nodes in repair (``SqlStore`` takes these methods from here).

Each method is one short transaction, as every other of ``SqlStore``; ``add_repair`` inserts with ON CONFLICT DO
NOTHING, so two replicas told of the same node at the same instant store one repair between them.
"""
from __future__ import annotations

from typing import Any, ContextManager

from sqlalchemy import Connection, delete, select, update

from autoscaler.store import tables
from autoscaler.store.base import EventRecord, PoolChange, RepairAlert, RepairMark, RepairRecord
from autoscaler.store.rows import storable

_COLUMNS = tuple(c.name for c in tables.repairs.c)
_ALERT_COLUMNS = tuple(c.name for c in tables.repair_alerts.c)


def repair_record(row: Any) -> RepairRecord:
    """A repairs row as a RepairRecord."""
    return RepairRecord(**{c: getattr(row, c) for c in _COLUMNS})


class SqlRepairs:
    """The Store's repair methods over ``_tx``, ``_insert_ignore`` and ``_append`` of the store it is mixed into."""

    def _tx(self) -> ContextManager[Connection]:
        raise NotImplementedError

    def _insert_ignore(self, table: Any, rows: list[dict[str, Any]]) -> Any:
        raise NotImplementedError

    def _append(self, conn: Connection, ev: EventRecord) -> int:
        raise NotImplementedError

    def add_repair(self, repair: RepairRecord) -> bool:
        row = storable(tables.repairs, {c: getattr(repair, c) for c in _COLUMNS})
        with self._tx() as conn:
            # RETURNING, not rowcount (see claim_dedup): the row is ours only when it was inserted now.
            return bool(conn.execute(self._insert_ignore(tables.repairs, [row]).returning(tables.repairs.c.node))
                        .all())

    def repairs(self, pool: str | None = None) -> list[RepairRecord]:
        t = tables.repairs
        query = select(t).order_by(t.c.since, t.c.node)
        if pool is not None:
            query = query.where(t.c.pool == pool)
        with self._tx() as conn:
            return [repair_record(r) for r in conn.execute(query).all()]

    def update_repair(self, pool: str, node: str, now: float, state: str | None = None,
                      error: str | None = None, replacement: int | None = None,
                      evicted: str | None = None) -> bool:
        t = tables.repairs
        values: dict[str, Any] = {"updated_at": now}
        for name, value in (("state", state), ("error", error), ("replacement", replacement), ("evicted", evicted)):
            if value is not None:
                values[name] = value
        with self._tx() as conn:
            done = conn.execute(update(t).where(t.c.pool == pool, t.c.node == node)
                                .values(**storable(t, values)))
        return bool(done.rowcount)

    def _mark_repairs(self, conn: Connection, pool: str, mark: RepairMark) -> None:
        """A final write's changes to the pool's repairs (see ``Store.finish``), inside its transaction."""
        t = tables.repairs
        if mark.ended:
            conn.execute(delete(t).where(t.c.pool == pool, t.c.node.in_(mark.ended)))
        if mark.replaced and mark.replacement is not None:
            conn.execute(update(t).where(t.c.pool == pool, t.c.node.in_(mark.replaced))
                         .values(updated_at=mark.at, replacement=mark.replacement))
        if mark.alerts:
            rows = [storable(tables.repair_alerts, {c: getattr(a, c) for c in _ALERT_COLUMNS}) for a in mark.alerts]
            conn.execute(self._insert_ignore(tables.repair_alerts, rows))

    def end_repair(self, pool: str, node: str, event: EventRecord | None,
                   change: PoolChange | None = None) -> int | None:
        t = tables.repairs
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.pool == pool, t.c.node == node))
            if event is None:
                return None
            event_id = self._append(conn, event)
            values = storable(tables.pools, change.columns() if change is not None else {})
            conn.execute(update(tables.pools).where(tables.pools.c.name == pool)
                         .values(**values, last_event_id=event_id))
        return event_id

    def note_repair_alerts(self, alerts: list[RepairAlert]) -> None:
        if not alerts:
            return
        rows = [storable(tables.repair_alerts, {c: getattr(a, c) for c in _ALERT_COLUMNS}) for a in alerts]
        with self._tx() as conn:
            conn.execute(self._insert_ignore(tables.repair_alerts, rows))

    def repair_alerts(self, pool: str) -> list[RepairAlert]:
        t = tables.repair_alerts
        with self._tx() as conn:
            rows = conn.execute(select(t).where(t.c.pool == pool).order_by(t.c.seen_at, t.c.node)).all()
        return [RepairAlert(**{c: getattr(r, c) for c in _ALERT_COLUMNS}) for r in rows]

    def cancel_repair_alerts(self, pool: str, node: str, now: float) -> int:
        t = tables.repair_alerts
        with self._tx() as conn:
            done = conn.execute(update(t).where(t.c.pool == pool, t.c.node == node, t.c.cancelled_at.is_(None))
                                .values(cancelled_at=now))
        return int(done.rowcount)

    def forget_repair_alerts(self, fingerprints: list[str]) -> int:
        if not fingerprints:
            return 0
        t = tables.repair_alerts
        with self._tx() as conn:
            done = conn.execute(delete(t).where(t.c.fingerprint.in_(sorted(set(fingerprints)))))
        return int(done.rowcount)
