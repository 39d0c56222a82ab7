"""The store on SQLAlchemy: SQLite (WAL, one writer at a time) or PostgreSQL, same code path."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, create_engine, delete, event, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError, DBAPIError

from autoscaler.models import PoolState
from autoscaler.store import schema
from autoscaler.store.base import EventRecord, Store, StoreUnavailable

_POOL_FIELDS = ("tracked_count", "count_changed_at", "paused", "pause_reason", "last_scale_out_at",
                "last_scale_in_at", "failures", "backoff_until", "last_event_id")


def _sqlite_engine(url: str) -> Any:
    parsed = make_url(url)
    if parsed.database and parsed.database != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Take the write lock at BEGIN: no deadlock between two readers that both want to write.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _hash_key(key: str) -> str:
    return key if len(key) <= 200 else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class SqlStore(Store):
    """Every method is one short transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(url)
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, pool_timeout=5)
        try:
            schema.metadata.create_all(self.engine)
        except IntegrityError:
            pass  # another process created the tables at the same instant

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, IntegrityError):
                raise
            raise StoreUnavailable(f"store unavailable: {type(exc.orig).__name__ if exc.orig else exc}") from None

    def _insert_ignore(self, table: Any, rows: list[dict[str, Any]]) -> Any:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).values(rows).on_conflict_do_nothing()
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).values(rows).on_conflict_do_nothing()

    def ensure_pools(self, names: list[str]) -> None:
        if not names:
            return
        with self._tx() as conn:
            conn.execute(self._insert_ignore(schema.pools, [{"name": n, "paused": False, "pause_reason": "",
                                                             "failures": 0} for n in names]))

    @staticmethod
    def _state(row: Any) -> PoolState:
        return PoolState(name=row.name, **{f: getattr(row, f) for f in _POOL_FIELDS})

    def pool(self, name: str) -> PoolState:
        with self._tx() as conn:
            row = conn.execute(select(schema.pools).where(schema.pools.c.name == name)).first()
        return self._state(row) if row else PoolState(name=name)

    def pools(self) -> dict[str, PoolState]:
        with self._tx() as conn:
            rows = conn.execute(select(schema.pools)).all()
        return {r.name: self._state(r) for r in rows}

    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str) -> bool:
        if not keys:
            return True
        hashed = sorted({_hash_key(k) for k in keys})
        t = schema.dedup
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.key.in_(hashed), t.c.expires_at <= now))
            result = conn.execute(self._insert_ignore(
                t, [{"key": k, "pool": pool, "expires_at": now + window, "claim": claim} for k in hashed]))
        return bool(result.rowcount and result.rowcount > 0)

    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        if not keys:
            return
        t = schema.dedup
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.key.in_([_hash_key(k) for k in keys]), t.c.claim == claim))

    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> bool:
        t = schema.pools
        with self._tx() as conn:
            result = conn.execute(
                update(t)
                .where(t.c.name == pool, (t.c.lease_owner.is_(None)) | (t.c.lease_until < now) | (t.c.lease_owner == owner))
                .values(lease_owner=owner, lease_until=now + ttl)
            )
        return result.rowcount == 1

    def release(self, pool: str, owner: str) -> None:
        t = schema.pools
        with self._tx() as conn:
            conn.execute(update(t).where(t.c.name == pool, t.c.lease_owner == owner)
                         .values(lease_owner=None, lease_until=None))

    @staticmethod
    def _event_row(ev: EventRecord) -> dict[str, Any]:
        return {"time": ev.time, "pool": ev.pool, "source": ev.source, "action": ev.action, "outcome": ev.outcome,
                "from_count": ev.from_, "to_count": ev.to, "reason": ev.reason,
                "alerts": json.dumps(ev.alerts), "details": json.dumps(ev.details, default=str)}

    def _append(self, conn: Connection, ev: EventRecord) -> int:
        result = conn.execute(insert(schema.events).values(self._event_row(ev)))
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def finish(self, pool: str, owner: str, event: EventRecord, changes: dict[str, Any]) -> int:
        t = schema.pools
        with self._tx() as conn:
            event_id = self._append(conn, event)
            conn.execute(update(t).where(t.c.name == pool)
                         .values(**changes, last_event_id=event_id, lease_owner=None, lease_until=None))
        return event_id

    def record(self, event: EventRecord) -> int:
        with self._tx() as conn:
            return self._append(conn, event)

    def update_pool(self, pool: str, event: EventRecord | None, changes: dict[str, Any]) -> int | None:
        t = schema.pools
        with self._tx() as conn:
            event_id = self._append(conn, event) if event else None
            values = dict(changes)
            if event_id is not None:
                values["last_event_id"] = event_id
            if values:
                conn.execute(update(t).where(t.c.name == pool).values(**values))
        return event_id

    @staticmethod
    def _record(row: Any) -> EventRecord:
        return EventRecord(id=row.id, time=row.time, pool=row.pool, source=row.source, action=row.action,
                           outcome=row.outcome, from_=row.from_count, to=row.to_count, reason=row.reason,
                           alerts=json.loads(row.alerts or "[]"), details=json.loads(row.details or "{}"))

    def events(self, pool: str | None, limit: int, before_id: int | None = None) -> list[EventRecord]:
        t = schema.events
        query = select(t).order_by(t.c.id.desc()).limit(limit)
        if pool is not None:
            query = query.where(t.c.pool == pool)
        if before_id is not None:
            query = query.where(t.c.id < before_id)
        with self._tx() as conn:
            return [self._record(r) for r in conn.execute(query).all()]

    def event(self, event_id: int) -> EventRecord | None:
        with self._tx() as conn:
            row = conn.execute(select(schema.events).where(schema.events.c.id == event_id)).first()
        return self._record(row) if row else None

    def recommendations(self, pool: str, since: float) -> list[tuple[float, int]]:
        t = schema.recommendations
        query = select(t.c.time, t.c.desired).where(t.c.pool == pool, t.c.time >= since).order_by(t.c.time)
        with self._tx() as conn:
            return [(float(r.time), int(r.desired)) for r in conn.execute(query).all()]

    def add_recommendation(self, pool: str, time: float, desired: int, forget_before: float) -> None:
        t = schema.recommendations
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.pool == pool, t.c.time < forget_before))
            conn.execute(insert(t).values(pool=pool, time=time, desired=desired))

    def ping(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except (OperationalError, DBAPIError) as exc:
            raise StoreUnavailable(f"store unavailable: {type(exc).__name__}") from None

    def prune(self, older_than: float) -> int:
        with self._tx() as conn:
            conn.execute(delete(schema.dedup).where(schema.dedup.c.expires_at < older_than))
            result = conn.execute(delete(schema.events).where(schema.events.c.time < older_than))
        return int(result.rowcount or 0)
