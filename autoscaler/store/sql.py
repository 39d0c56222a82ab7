"""The store on SQLAlchemy: SQLite (WAL, one writer at a time) or PostgreSQL, same code path.

Expiry (leases, dedup claims) is written and judged on the database's clock: ``expiry.py``.

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
import logging
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, bindparam, case, delete, insert, select, update
from sqlalchemy.exc import DataError, DBAPIError, DisconnectionError, IntegrityError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from autoscaler.models import PoolState
from autoscaler.redact import redact_text
from autoscaler.store import deadline, expiry, probe, tables
from autoscaler.store.base import (DedupConfirm, EventRecord, NodesView, PoolChange, PoolView, QuickState,
                                   RepairMark, Shortcut, StoreUnavailable)
from autoscaler.store.interfaces import Store
from autoscaler.store.compiled import Compiled, execute
from autoscaler.store.rows import EVENT_COLUMNS, STATE_COLUMNS, event_row, hash_key, nodes_json, pool_state, storable
from autoscaler.store.gate import WriterGate
from autoscaler.store.connections import (StoreOptions, after_fork_dispose, make_engine, normalize_url,
                                          postgres_engine, sqlite_file)
from autoscaler.store.sqlite_file import SqliteFile
from autoscaler.store.sql_reads import SqlReads
from autoscaler.store.migrate import upgrade
from autoscaler.store.removals import SqlRemovals
from autoscaler.store.boot import supervised
from autoscaler.store.repairs import SqlRepairs
from autoscaler.store.gangs import SqlGangs

log = logging.getLogger(__name__)

# Hot-path statements built once, values bound at execution: building them per call, and compiling the dialect
# INSERT ... ON CONFLICT that SQLAlchemy never caches, was most of the CPU a webhook spent in the store.
_POOL = select(tables.pools).where(tables.pools.c.name == bindparam("p_name"))
_QUICK = (select(*(tables.pools.c[c] for c in STATE_COLUMNS), tables.events.c.to_count)
          .select_from(tables.pools.outerjoin(tables.events, tables.events.c.id == tables.pools.c.last_event_id))
          .where(tables.pools.c.name == bindparam("p_name")))
_SET_LAST_EVENT = (update(tables.pools).where(tables.pools.c.name == bindparam("p_name"))
                   .values(last_event_id=bindparam("p_event")))
_INSERT_EVENT = insert(tables.events)
_INSERT_EVENT_ID = _INSERT_EVENT.returning(tables.events.c.id)  # the short cut's (``shortcut``): its id by RETURNING


@functools.lru_cache(maxsize=64)
def _finish_sql(fields: tuple[str, ...], release: bool = True) -> Any:
    """UPDATE of a pool's ``fields`` that also records its last event and (``release``) releases its lease, if still
    the owner's (a decision whose lease lapsed records what it did, but leaves the lease another decision took
    since)."""
    values: dict[str, Any] = {f: bindparam(f"p_{f}") for f in fields}
    p = tables.pools.c
    ours = p.lease_owner == bindparam("p_owner")
    if release:
        values.update(lease_owner=case((ours, None), else_=p.lease_owner),
                      lease_until=case((ours, None), else_=p.lease_until))
    return (update(tables.pools).where(p.name == bindparam("p_name"))
            .values(**values, last_event_id=bindparam("p_event")))


class SqlStore(SqlRemovals, SqlRepairs, SqlGangs, SqlReads, Store):
    """Every method is one short transaction."""

    def __init__(self, url: str, options: StoreOptions | None = None, *, migrate: bool = True) -> None:
        self.options = options or StoreOptions()
        parsed = normalize_url(url)
        self.url = parsed.render_as_string(hide_password=True)
        self.dialect = parsed.get_backend_name()
        self.engine = make_engine(url, self.options)
        database = parsed.database if self.dialect == "sqlite" else None
        self.gate = WriterGate(os.path.abspath(database)) if database and database != ":memory:" else None
        path = sqlite_file(parsed) if self.dialect == "sqlite" else None
        self.file = SqliteFile(path, self.options.probe_interval, self.engine.dispose) if path else None
        after_fork_dispose(self.engine)
        self._setup_lock = threading.Lock()
        self._write_ok_until = float("-inf")  # monotonic: until when the last write probe's success stands
        self._later: tuple[bool, list[str]] | None = None  # (migrate, pools) to set up once the file is back
        self._compiled_cache: dict[int, tuple[Any, Compiled]] = {}  # id(statement) -> (statement, compiled)
        try:
            if self.file is not None:
                self.file.check()
            if migrate:
                self.migrate()
        except StoreUnavailable:
            if not self._may_boot_degraded():
                raise  # a first start: say what is wrong and stop
            # A gunicorn worker started (after a crash or a timeout) while the file its master opened is gone or
            # read-only, or while PostgreSQL is down: serve 503 like its siblings, rather than fail to boot (which
            # makes gunicorn's master exit: the whole service gone) or create a fresh file.
            log.error("store not usable as this worker starts; it answers 503 until the store is back")
            self._later = (migrate, [])

    def _may_boot_degraded(self) -> bool:
        """Whether this is a worker a gunicorn master forked after checking the store (see ``store/boot.py``)."""
        return self.file.pinned if self.file is not None else self.dialect == "postgresql" and supervised()

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

    def _guard(self) -> None:
        """SQLite: StoreUnavailable unless the file opened at start is still at its path, and writable."""
        if self.file is not None:
            self.file.check()
        if self._later is not None:
            self._set_up_later()

    def _set_up_later(self) -> None:
        """The migration and pool rows a worker could not write at its start, once the file is usable again."""
        with self._setup_lock:
            later, self._later = self._later, None  # cleared first: the transactions below pass through _guard
            if later is None:
                return
            try:
                if later[0]:
                    self.migrate()
                self._ensure_pools(later[1])
            except BaseException:
                self._later = later
                raise
            log.warning("store: set up at last (schema migrated, pool rows written); this worker is ready")

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        self._guard()
        try:
            with _unavailable("store unavailable"), deadline.call(self.engine):
                with self.gate.hold() if self.gate else nullcontext(), self.engine.begin() as conn:
                    yield conn
        except StoreUnavailable:
            self._write_ok_until = float("-inf")  # the next readiness probe writes again (store/probe.py)
            raise

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """One SELECT outside the writer gate: on SQLite a deferred BEGIN (``connections.sqlite_engine``), so a
        page's reads neither wait for a decision's write nor hold one up."""
        self._guard()
        with _unavailable("store unavailable"), deadline.call(self.engine), self.engine.connect() as conn:
            yield conn.execution_options(read_only=True)

    def _insert_ignore(self, table: Any, rows: list[dict[str, Any]]) -> Any:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).values(rows).on_conflict_do_nothing()
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).values(rows).on_conflict_do_nothing()

    def ensure_pools(self, names: list[str]) -> None:
        if not names:
            return
        if self._later is not None:
            self._later = (self._later[0], list(names))
            return
        try:
            self._ensure_pools(names)
        except StoreUnavailable:  # the store went away between the migration and the pool rows (a worker's boot)
            if not self._may_boot_degraded():
                raise
            log.error("store not usable as this worker starts; it answers 503 until the store is back")
            self._later = (False, list(names))

    def _ensure_pools(self, names: list[str]) -> None:
        with self._tx() as conn:
            conn.execute(self._insert_ignore(tables.pools, [{"name": n, "paused": False, "pause_reason": "",
                                                             "short_reason": "", "failures": 0} for n in names]))

    @staticmethod
    def _state(row: Any) -> PoolState:
        return pool_state(row._mapping)

    def pool(self, name: str) -> PoolState:
        with self._tx() as conn:
            row = conn.execute(_POOL, {"p_name": name}).first()
        return self._state(row) if row else PoolState(name=name)

    def pools(self) -> dict[str, PoolState]:
        with self._tx() as conn:
            rows = conn.execute(select(tables.pools)).all()
        return {r.name: self._state(r) for r in rows}

    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str,
                    longest: float | None = None) -> bool:
        if not keys:
            return True
        count, params = expiry.claim_params(pool, keys, now, window, claim, longest)
        with self._tx() as conn:
            # RETURNING, not rowcount: psycopg reports -1 for a multi-row INSERT ... ON CONFLICT.
            rows = execute(conn, self._compiled(expiry.claim_sql(count, self.dialect)), params, "all")
        return expiry.claimed(rows, claim)

    def shortcut(self, pool: str,
               plan: Callable[[QuickState | None], Shortcut | None]) -> tuple[int, bool] | None:
        # One transaction (one connection, one BEGIN): the read, then the claim, which decides between the event and
        # the duplicate, and the event. The read is inside the writer's lock, so nothing is written in between.
        # Its statements run on the transaction's DBAPI cursor, compiled once by SQLAlchemy (``store/compiled.py``):
        # the execution layer cost about three times the database's own calls on this, the hottest path.
        with self._tx() as conn:
            row = execute(conn, self._compiled(_QUICK), {"p_name": pool}, "one")
            settled = plan(QuickState(pool_state(row), row["to_count"]) if row else None)
            if settled is None:
                return None
            window = settled.expires_at - settled.now  # the pool's whole window: also the longest a claim holds
            count, params = expiry.claim_params(pool, settled.keys, settled.now, window, settled.claim, window)
            claimed = expiry.claimed(execute(conn, self._compiled(expiry.claim_sql(count, self.dialect)), params,
                                             "all"), settled.claim) if count else True
            event = event_row(settled.event if claimed else settled.duplicate)
            event_id = int(execute(conn, self._compiled(_INSERT_EVENT_ID, EVENT_COLUMNS), event, "one")["id"])
            if claimed:
                execute(conn, self._compiled(_SET_LAST_EVENT), {"p_name": pool, "p_event": event_id})
        return event_id, not claimed

    def _compiled(self, statement: Any, column_keys: tuple[str, ...] | None = None) -> Compiled:
        """``statement`` compiled for this engine's dialect, once (the statements are module-level or cached)."""
        found = self._compiled_cache.get(id(statement))
        if found is None or found[0] is not statement:
            if len(self._compiled_cache) >= 256:  # a claim statement per key count: bounded like ``claim_sql``'s cache
                self._compiled_cache.clear()
            found = self._compiled_cache[id(statement)] = (statement, Compiled.of(statement, self.engine.dialect,
                                                                                    column_keys))
        return found[1]

    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        if not keys:
            return
        t = tables.dedup
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.key.in_([hash_key(k) for k in keys]), t.c.claim == claim))

    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> PoolState | None:
        params = {"p_name": pool, "p_owner": owner, "p_now": now, "p_ttl": ttl}
        sql = expiry.lease_sql(self.dialect)
        with self._tx() as conn:
            if self.engine.dialect.update_returning:  # PostgreSQL; SQLite >= 3.35
                row = conn.execute(sql["returning"], params).first()
            elif conn.execute(sql["acquire"], params).rowcount == 1:  # older SQLite: read it back, same transaction
                row = conn.execute(_POOL, {"p_name": pool}).first()
            else:
                row = None
            if row is None:  # held: at most ``ttl`` more, however far back the clock stepped
                conn.execute(sql["bound"], params)
        return self._state(row) if row else None

    def renew(self, pool: str, owner: str, now: float, ttl: float) -> bool:
        with self._tx() as conn:
            result = conn.execute(expiry.lease_sql(self.dialect)["renew"],
                                  {"p_name": pool, "p_owner": owner, "p_now": now, "p_ttl": ttl})
        return bool(result.rowcount)

    def release(self, pool: str, owner: str) -> None:
        t = tables.pools
        with self._tx() as conn:
            conn.execute(update(t).where(t.c.name == pool, t.c.lease_owner == owner)
                         .values(lease_owner=None, lease_until=None))

    def _append(self, conn: Connection, ev: EventRecord) -> int:
        result = conn.execute(_INSERT_EVENT, event_row(ev))
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def finish(self, pool: str, owner: str, event: EventRecord, change: PoolChange,
               confirm: DedupConfirm | None = None, *, release: bool = True, repairs: RepairMark | None = None) -> int:
        columns = storable(tables.pools, change.columns())
        with self._tx() as conn:
            if repairs is not None:
                self._mark_repairs(conn, pool, repairs)
            event_id = self._append(conn, event)
            conn.execute(_finish_sql(tuple(sorted(columns)), release),
                         {"p_name": pool, "p_owner": owner, "p_event": event_id,
                          **{f"p_{k}": v for k, v in columns.items()}})
            if confirm is not None and confirm.keys:
                self._confirm(conn, confirm)
        return event_id

    def record(self, event: EventRecord) -> int:
        with self._tx() as conn:
            return self._append(conn, event)

    def update_pool(self, pool: str, event: EventRecord | None, change: PoolChange) -> int | None:
        t = tables.pools
        with self._tx() as conn:
            event_id = self._append(conn, event) if event else None
            values = storable(tables.pools, change.columns())
            if event_id is not None:
                values["last_event_id"] = event_id
            if values:
                conn.execute(update(t).where(t.c.name == pool).values(**values))
        return event_id

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

    def scale_outs(self, pool: str, since: float) -> list[tuple[float, int, int]]:
        t = tables.events  # ix_events_time bounds it to the last few minutes' events
        query = (select(t.c.time, t.c.from_count, t.c.to_count)
                 .where(t.c.time >= since, t.c.pool == pool, t.c.action == "scale_out",
                        ((t.c.outcome == "scaled") | ((t.c.outcome == "no_capacity")
                                                      & (t.c.to_count < t.c.from_count))),
                        t.c.from_count.is_not(None), t.c.to_count.is_not(None))
                 .order_by(t.c.time))
        with self._tx() as conn:
            return [(float(r.time), int(r.from_count), int(r.to_count)) for r in conn.execute(query).all()]

    def hold_lease(self, name: str, owner: str, now: float, ttl: float) -> bool:
        t = tables.leases
        sql = expiry.named_lease_sql(self.dialect)
        params = {"p_name": name, "p_owner": owner, "p_now": now, "p_ttl": ttl}
        with self._tx() as conn:
            # A new row expires at once (until 0): the UPDATE below is what takes it, on the database's clock.
            conn.execute(self._insert_ignore(t, [{"name": name, "owner": owner, "until": 0.0}]))
            # Same pattern as a pool's lease: one conditional UPDATE, so exactly one owner sees its row change.
            if conn.execute(sql["take"], params).rowcount == 1:
                return True
            conn.execute(sql["bound"], params)
            return False

    def release_lease(self, name: str, owner: str) -> None:
        t = tables.leases
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.name == name, t.c.owner == owner))

    def save_view(self, view: PoolView) -> None:
        t = tables.pool_views
        row = storable(t, {"pool": view.pool, "current": view.current, "busy": view.busy, "detail": view.detail,
                           "in_flight": view.in_flight, "error": view.error, "read_at": view.read_at})
        with self._tx() as conn:
            conn.execute(self._insert_ignore(t, [row]))
            conn.execute(update(t).where(t.c.pool == view.pool, t.c.read_at <= view.read_at).values(**row))

    def save_nodes(self, view: NodesView) -> None:
        t = tables.node_views
        row = storable(t, {"pool": view.pool, "error": view.error, "read_at": view.read_at})
        row["nodes"] = nodes_json(view)  # JSON (ASCII, unbounded): bounding it to MAX_TEXT would cut the list
        with self._tx() as conn:
            conn.execute(self._insert_ignore(t, [row]))
            conn.execute(update(t).where(t.c.pool == view.pool, t.c.read_at <= view.read_at).values(**row))

    def ping(self) -> None:
        """The store answers, holds every table and column the service uses, and takes a write (store/probe.py)."""
        self._guard()
        with _unavailable("store unavailable"), deadline.call(self.engine), self.engine.connect() as conn:
            reader = conn.execution_options(read_only=True)  # SQLite: no write lock for the schema's probe
            try:
                for statement in probe.SCHEMA_PROBES:
                    reader.execute(statement)
            except DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                reader.rollback()
                problem = probe.schema_problem(reader)
                if not problem:
                    raise
                log.warning("store: %s", problem)
                raise StoreUnavailable(f"store unavailable: {problem}") from None
        room = probe.disk_room(self.file.path) if self.file is not None else ""
        if room:
            self._write_ok_until = float("-inf")
            raise StoreUnavailable(f"store unavailable: it does not take a write: {room}")
        started = time.monotonic()
        if started < self._write_ok_until:  # at most one probe write a second (a failed transaction resets it)
            return
        with _unavailable("store unavailable: it does not take a write"), deadline.call(self.engine):
            with self.gate.hold() if self.gate else nullcontext(), self.engine.begin() as conn:
                probe.write(conn)
        self._write_ok_until = started + probe.WRITE_EVERY

    def now(self, local: float) -> float:
        if self.dialect != "postgresql":
            return local
        with self._read() as conn:
            return float(conn.execute(select(expiry.now_expr(self.dialect))).scalar_one())

    def _confirm(self, conn: Connection, confirm: DedupConfirm) -> None:
        conn.execute(expiry.confirm_sql(self.dialect),
                     {"p_keys": [hash_key(k) for k in confirm.keys], "p_claim": confirm.claim, "p_now": confirm.now,
                      "p_window": confirm.expires_at - confirm.now})

    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        """One small batch of each: events older than ``older_than`` (when set) and dedup keys past expiry."""
        removed = 0
        expired = tables.dedup.c.expires_at <= expiry.now_expr(self.dialect)
        for table, cond in ((tables.events, tables.events.c.time < older_than if older_than is not None else None),
                            (tables.dedup, expired)):
            if cond is None:
                continue
            pk = list(table.primary_key.columns)[0]
            # SKIP LOCKED: never wait for rows a decision is writing; they go in a later batch.
            victims = select(pk).where(cond).order_by(pk).limit(batch).with_for_update(skip_locked=True)
            with self._tx() as conn:
                result = conn.execute(delete(table).where(pk.in_(victims.scalar_subquery())), {"p_now": now})
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
