"""The store on SQLAlchemy: SQLite (WAL, one writer at a time) or PostgreSQL, same code path.

Race-freedom under PostgreSQL's READ COMMITTED: the lease is one conditional UPDATE of the pool's row; a
concurrent UPDATE waits for the row lock, then re-checks the WHERE clause against the committed row, so exactly
one replica sees ``rowcount == 1``. A dedup key is claimed with INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE
expired: a concurrent claim of the same key waits for the first transaction, then re-checks the WHERE clause against
the row it committed (no longer expired) and claims nothing. Every wait is
bounded by ``lock_timeout`` / ``statement_timeout`` (see ``connections.py``), and every database failure becomes
StoreUnavailable after the transaction rolled back, so nothing is half-written.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, bindparam, delete, insert, select, text, update
from sqlalchemy.exc import DataError, DBAPIError, DisconnectionError, IntegrityError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from autoscaler.models import PoolState
from autoscaler.redact import redact_text
from autoscaler.store import tables
from autoscaler.store.base import DedupConfirm, EventRecord, Store, StoreUnavailable
from autoscaler.store.gate import WriterGate
from autoscaler.store.connections import StoreOptions, after_fork_dispose, make_engine, normalize_url, postgres_engine
from autoscaler.store.migrate import upgrade

log = logging.getLogger(__name__)

_POOL_FIELDS = ("tracked_count", "count_changed_at", "paused", "pause_reason", "last_scale_out_at",
                "last_scale_in_at", "failures", "backoff_until", "last_event_id")


# Hot-path statements built once, values bound at execution: building them per call, and compiling the dialect
# INSERT ... ON CONFLICT that SQLAlchemy never caches, was most of the CPU a webhook spent in the store.
_POOL = select(tables.pools).where(tables.pools.c.name == bindparam("p_name"))
_ACQUIRE = (update(tables.pools)
            .where(tables.pools.c.name == bindparam("p_name"),
                   tables.pools.c.lease_owner.is_(None) | (tables.pools.c.lease_until < bindparam("p_now"))
                   | (tables.pools.c.lease_owner == bindparam("p_owner")))
            .values(lease_owner=bindparam("p_owner"), lease_until=bindparam("p_until")))
_ACQUIRE_RETURNING = _ACQUIRE.returning(*tables.pools.c)
_INSERT_EVENT = insert(tables.events)
_CONFIRM_KEYS = (update(tables.dedup).where(tables.dedup.c.key.in_(bindparam("p_keys", expanding=True)),
                                            tables.dedup.c.claim == bindparam("p_claim"))
                 .values(expires_at=bindparam("p_expires")))


@functools.lru_cache(maxsize=64)
def _finish_sql(fields: tuple[str, ...]) -> Any:
    """UPDATE of a pool's ``fields`` that also records its last event and releases its lease."""
    values: dict[str, Any] = {f: bindparam(f"p_{f}") for f in fields}
    return (update(tables.pools).where(tables.pools.c.name == bindparam("p_name"))
            .values(**values, last_event_id=bindparam("p_event"), lease_owner=None, lease_until=None))


@functools.lru_cache(maxsize=64)
def _claim_sql(keys: int) -> Any:
    """Claim ``keys`` dedup rows in one statement (the same SQL on SQLite and PostgreSQL): a new key is inserted,
    an expired one taken over, an unexpired one left alone; RETURNING lists the keys claimed."""
    rows = ", ".join(f"(:k{i}, :pool, :expires_at, :claim)" for i in range(keys))
    return text(f"INSERT INTO dedup (key, pool, expires_at, claim) VALUES {rows} ON CONFLICT (key) DO UPDATE "
                "SET pool = excluded.pool, expires_at = excluded.expires_at, claim = excluded.claim "
                "WHERE dedup.expires_at <= :now RETURNING key")


# The events table's columns as the hot path writes them (``_event_row``'s keys, in order).
_EVENT_COLUMNS = ("time", "pool", "source", "action", "outcome", "from_count", "to_count", "reason", "alerts",
                  "details")


def _settle_write_sql(keys: int) -> str:
    """PostgreSQL: claim ``keys`` dedup keys, append the settled event (or, with none claimed, the duplicate's
    columns ``d_*``) and point the pool at it, in one statement."""
    casts = {"time": "CAST({} AS double precision)", "from_count": "CAST({} AS integer)",
             "to_count": "CAST({} AS integer)"}
    values = []
    for column in _EVENT_COLUMNS:
        cast = casts.get(column, "{}")
        values.append(f"CASE WHEN n.c > 0 THEN {cast.format(':' + column)} ELSE {cast.format(':d_' + column)} END")
    claimed = (f"claimed AS ({_claim_sql(keys).text}), n AS (SELECT count(*) AS c FROM claimed)" if keys
               else "n AS (SELECT 1 AS c)")
    return (f"WITH {claimed}, "
            f"ev AS (INSERT INTO events ({', '.join(_EVENT_COLUMNS)}) SELECT {', '.join(values)} FROM n RETURNING id), "
            "up AS (UPDATE pools SET last_event_id = ev.id FROM ev, n WHERE pools.name = :pool AND n.c > 0) "
            "SELECT ev.id, n.c FROM ev, n")


def _claim_params(pool: str, keys: tuple[str, ...], now: float, expires_at: float,
                  claim: str) -> tuple[int, dict[str, Any]]:
    """How many distinct keys, and the parameters of ``_claim_sql`` for them (long keys stored hashed)."""
    hashed = sorted({_hash_key(k) for k in keys})
    params: dict[str, Any] = {f"k{i}": k for i, k in enumerate(hashed)}
    params.update(pool=pool, expires_at=expires_at, claim=claim, now=now)
    return len(hashed), params


def _hash_key(key: str) -> str:
    return key if len(key) <= 200 else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class _RawSql:
    """The hot path's SQL in the DBAPI's own parameter style (named: ``:x`` for sqlite3, ``%(x)s`` for psycopg)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        fields = ", ".join(f"p.{f}" for f in _POOL_FIELDS)
        self.settle_read = self._style(f"SELECT {fields}, e.to_count FROM pools p "
                                       "LEFT JOIN events e ON e.id = p.last_event_id WHERE p.name = :name")
        self.insert_event = self._style(f"INSERT INTO events ({', '.join(_EVENT_COLUMNS)}) "
                                        f"VALUES ({', '.join(':' + c for c in _EVENT_COLUMNS)}) RETURNING id")
        self.set_last_event = self._style("UPDATE pools SET last_event_id = :event WHERE name = :name")
        self.claim = functools.lru_cache(maxsize=64)(lambda n: self._style(_claim_sql(n).text))
        self.settle_write = functools.lru_cache(maxsize=64)(lambda n: self._style(_settle_write_sql(n)))

    def _style(self, sql: str) -> str:
        return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql) if self.dialect == "postgresql" else sql


class SqlStore(Store):
    """Every method is one short transaction."""

    def __init__(self, url: str, options: StoreOptions | None = None, *, migrate: bool = True) -> None:
        self.options = options or StoreOptions()
        parsed = normalize_url(url)
        self.url = parsed.render_as_string(hide_password=True)
        self.dialect = parsed.get_backend_name()
        self.engine = make_engine(url, self.options)
        database = parsed.database if self.dialect == "sqlite" else None
        self.gate = WriterGate(os.path.abspath(database)) if database and database != ":memory:" else None
        self._sql = _RawSql(self.dialect)
        after_fork_dispose(self.engine)
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        """Bring the schema to the newest revision (every replica may call this at once)."""
        with _unavailable("cannot migrate the schema"):
            if self.dialect == "postgresql":
                engine = postgres_engine(normalize_url(self.url_with_password), self.options, pooled=False)
                try:
                    upgrade(engine)
                finally:
                    engine.dispose()
            else:
                upgrade(self.engine)

    @property
    def url_with_password(self) -> str:
        """The real URL, for new engines only; never log it."""
        return self.engine.url.render_as_string(hide_password=False)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with _unavailable("store unavailable"):
            with self.gate.hold() if self.gate else nullcontext(), self.engine.begin() as conn:
                yield conn

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
            conn.execute(self._insert_ignore(tables.pools, [{"name": n, "paused": False, "pause_reason": "",
                                                             "failures": 0} for n in names]))

    @staticmethod
    def _state(row: Any) -> PoolState:
        return PoolState(name=row.name, **{f: getattr(row, f) for f in _POOL_FIELDS})

    def pool(self, name: str) -> PoolState:
        with self._tx() as conn:
            row = conn.execute(_POOL, {"p_name": name}).first()
        return self._state(row) if row else PoolState(name=name)

    def pools(self) -> dict[str, PoolState]:
        with self._tx() as conn:
            rows = conn.execute(select(tables.pools)).all()
        return {r.name: self._state(r) for r in rows}

    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str) -> bool:
        if not keys:
            return True
        count, params = _claim_params(pool, keys, now, now + window, claim)
        with self._tx() as conn:
            # RETURNING, not rowcount: psycopg reports -1 for a multi-row INSERT ... ON CONFLICT.
            return bool(conn.execute(_claim_sql(count), params).all())

    def settle(self, pool: str, keys: tuple[str, ...], claim: str, now: float, expires_at: float,
               build: Callable[[PoolState, int | None], EventRecord | None],
               duplicate: EventRecord) -> tuple[EventRecord, bool] | None:
        # No lease, and the state is read before the write: what settles a decision here (a pause, a running
        # cooldown) cannot be made untrue by a concurrent decision (a cooldown only ever grows), so reading it a
        # moment early only orders this event before a concurrent resume. The claim decides between the event and
        # the duplicate in the same transaction as the event is written.
        with self._raw() as (fairy, cur):
            cur.execute(self._sql.settle_read, {"name": pool})
            row = cur.fetchone()
            if row is None:
                return None
            state = PoolState(pool, *row[:len(_POOL_FIELDS)])
            event = build(replace(state, paused=bool(state.paused)), row[-1])
            if event is None:
                return None
            count, params = _claim_params(pool, keys, now, expires_at, claim)
            if self.dialect == "postgresql":  # one statement, one round trip (autocommit)
                params.update(self._event_row(event))
                params.update({f"d_{k}": v for k, v in self._event_row(duplicate).items()})
                cur.execute(self._sql.settle_write(count), params)
                event_id, claimed = cur.fetchone()
            else:
                with self.gate.hold() if self.gate else nullcontext():
                    cur.execute("BEGIN IMMEDIATE")
                    claimed = 1
                    if count:
                        cur.execute(self._sql.claim(count), params)
                        claimed = len(cur.fetchall())
                    cur.execute(self._sql.insert_event, self._event_row(event if claimed else duplicate))
                    event_id = cur.fetchone()[0]
                    if claimed:
                        cur.execute(self._sql.set_last_event, {"name": pool, "event": event_id})
                    fairy.commit()
        if not claimed:
            return replace(duplicate, id=int(event_id)), True
        return replace(event, id=int(event_id)), False

    @contextmanager
    def _raw(self) -> Iterator[tuple[Any, Any]]:
        """A pooled DBAPI connection in autocommit mode and a cursor, for the hottest path only: SQLAlchemy's
        execution layer cost more CPU than SQLite itself there, and each PostgreSQL round trip costs the worker
        CPU too. Failures are wrapped as SQLAlchemy's, so they map to StoreUnavailable the same way."""
        dbapi = self.engine.dialect.loaded_dbapi
        with _unavailable("store unavailable"):
            try:
                fairy = self.engine.raw_connection()
            except dbapi.Error as exc:  # connecting failed: no connection to give back
                raise DBAPIError.instance(None, None, exc, dbapi.Error) from None
            cur = None
            try:
                if self.dialect == "postgresql":
                    fairy.dbapi_connection.autocommit = True  # type: ignore[union-attr] # checked out: never None
                cur = fairy.cursor()
                yield fairy, cur
            except dbapi.Error as exc:
                self._abandon(fairy, cur, exc)
                raise DBAPIError.instance(None, None, exc, dbapi.Error) from None
            except BaseException as exc:
                self._abandon(fairy, cur, exc)
                raise
            finally:
                if self.dialect == "postgresql" and fairy.dbapi_connection is not None:
                    try:
                        fairy.dbapi_connection.autocommit = False
                    except dbapi.Error:
                        fairy.invalidate()
                fairy.close()  # back to the pool

    def _abandon(self, fairy: Any, cur: Any, exc: BaseException) -> None:
        """Roll back; drop a connection that is broken or cannot roll back, so the pool never hands it out again."""
        try:
            fairy.rollback()
        except Exception:  # noqa: BLE001 - the connection is unusable either way
            fairy.invalidate()
            return
        if isinstance(exc, self.engine.dialect.loaded_dbapi.Error) and self.engine.dialect.is_disconnect(
                exc, fairy.dbapi_connection, cur):
            fairy.invalidate()

    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        if not keys:
            return
        t = tables.dedup
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.key.in_([_hash_key(k) for k in keys]), t.c.claim == claim))

    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> PoolState | None:
        params = {"p_name": pool, "p_owner": owner, "p_now": now, "p_until": now + ttl}
        with self._tx() as conn:
            if self.engine.dialect.update_returning:  # PostgreSQL; SQLite >= 3.35
                row = conn.execute(_ACQUIRE_RETURNING, params).first()
            elif conn.execute(_ACQUIRE, params).rowcount == 1:  # older SQLite: read it back in the same transaction
                row = conn.execute(_POOL, {"p_name": pool}).first()
            else:
                row = None
        return self._state(row) if row else None

    def release(self, pool: str, owner: str) -> None:
        t = tables.pools
        with self._tx() as conn:
            conn.execute(update(t).where(t.c.name == pool, t.c.lease_owner == owner)
                         .values(lease_owner=None, lease_until=None))

    @staticmethod
    def _event_row(ev: EventRecord) -> dict[str, Any]:
        values = (ev.time, ev.pool, ev.source, ev.action, ev.outcome, ev.from_, ev.to, ev.reason,
                  json.dumps(ev.alerts), json.dumps(ev.details, default=str))
        return dict(zip(_EVENT_COLUMNS, values))

    def _append(self, conn: Connection, ev: EventRecord) -> int:
        result = conn.execute(_INSERT_EVENT, self._event_row(ev))
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def finish(self, pool: str, owner: str, event: EventRecord, changes: dict[str, Any],
               confirm: DedupConfirm | None = None) -> int:
        with self._tx() as conn:
            event_id = self._append(conn, event)
            conn.execute(_finish_sql(tuple(sorted(changes))),
                         {"p_name": pool, "p_event": event_id, **{f"p_{k}": v for k, v in changes.items()}})
            if confirm is not None and confirm.keys:
                self._confirm(conn, confirm)
        return event_id

    def record(self, event: EventRecord) -> int:
        with self._tx() as conn:
            return self._append(conn, event)

    def update_pool(self, pool: str, event: EventRecord | None, changes: dict[str, Any]) -> int | None:
        t = tables.pools
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
        t = tables.events
        query = select(t).order_by(t.c.id.desc()).limit(limit)
        if pool is not None:
            query = query.where(t.c.pool == pool)
        if before_id is not None:
            query = query.where(t.c.id < before_id)
        with self._tx() as conn:
            return [self._record(r) for r in conn.execute(query).all()]

    def event(self, event_id: int) -> EventRecord | None:
        with self._tx() as conn:
            row = conn.execute(select(tables.events).where(tables.events.c.id == event_id)).first()
        return self._record(row) if row else None

    def recommendations(self, pool: str, since: float) -> list[tuple[float, int]]:
        t = tables.recommendations
        query = select(t.c.time, t.c.desired).where(t.c.pool == pool, t.c.time >= since).order_by(t.c.time)
        with self._tx() as conn:
            return [(float(r.time), int(r.desired)) for r in conn.execute(query).all()]

    def add_recommendation(self, pool: str, time: float, desired: int, forget_before: float) -> None:
        t = tables.recommendations
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.pool == pool, t.c.time < forget_before))
            conn.execute(insert(t).values(pool=pool, time=time, desired=desired))

    def ping(self) -> None:
        with self._tx() as conn:
            conn.execute(text("SELECT 1"))

    @staticmethod
    def _confirm(conn: Connection, confirm: DedupConfirm) -> None:
        conn.execute(_CONFIRM_KEYS, {"p_keys": [_hash_key(k) for k in confirm.keys], "p_claim": confirm.claim,
                                     "p_expires": confirm.expires_at})

    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        """One small batch of each: events older than ``older_than`` (when set) and dedup keys past expiry."""
        removed = 0
        for table, cond in ((tables.events, tables.events.c.time < older_than if older_than is not None else None),
                            (tables.dedup, tables.dedup.c.expires_at <= now)):
            if cond is None:
                continue
            pk = list(table.primary_key.columns)[0]
            # SKIP LOCKED: never wait for rows a decision is writing; they go in a later batch.
            victims = select(pk).where(cond).order_by(pk).limit(batch).with_for_update(skip_locked=True)
            with self._tx() as conn:
                result = conn.execute(delete(table).where(pk.in_(victims.scalar_subquery())))
            removed += int(result.rowcount or 0)
        return removed


_BUG_ERRORS = (IntegrityError, ProgrammingError, DataError)


@contextmanager
def _unavailable(what: str) -> Iterator[None]:
    """Turn a database failure (connection, timeout, lock, failover, pool exhausted) into StoreUnavailable."""
    try:
        yield
    except (DBAPIError, PoolTimeoutError, DisconnectionError) as exc:
        if isinstance(exc, _BUG_ERRORS):
            raise
        orig = getattr(exc, "orig", None)
        code = getattr(orig, "sqlstate", None)
        name = type(orig or exc).__name__
        detail = redact_text(str(orig or exc).splitlines()[0] if str(orig or exc) else "")[:300]
        log.warning("%s: %s%s: %s", what, name, f" (SQLSTATE {code})" if code else "", detail)
        raise StoreUnavailable(f"{what}: {name}") from None
