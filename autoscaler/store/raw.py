"""The cooldown short cut's SQL on a raw DBAPI connection: the one path that bypasses SQLAlchemy's execution layer.

Why it exists (measured, BENCHMARKS.md "the short cut"): for a pool in its cooldown, an alert storm is answered by
a read and one write. Through SQLAlchemy's Core execution layer (events, result proxies, compiled-cache lookups)
that cost more CPU than SQLite itself: 56 % of a webhook's handling was in the engine, 23 % in ``SqlStore._tx``
alone; on a raw pooled connection the in-process CPU per webhook fell from 1.57 ms to 0.91 ms on SQLite and from
3.05 ms to 1.33 ms on PostgreSQL, where the write is also one statement (one round trip, autocommit).

Everything here is derived from ``tables``: the column lists, and PostgreSQL's casts from the columns' types. Rows
are built and read by column name; nothing is positional. Failures surface as SQLAlchemy's ``DBAPIError`` (see
``RawConnections.cursor``), so the caller maps them to StoreUnavailable exactly as on the SQLAlchemy path.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from autoscaler.models import PoolState
from autoscaler.storable import MAX_TEXT, clean
from autoscaler.store import tables
from autoscaler.store.base import EventRecord
from autoscaler.store.connections import broken_sqlite_connection

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


def event_record(row: Any) -> EventRecord:
    """An events row (any mapping-like result row) as an EventRecord."""
    values = {_EVENT_ATTRS.get(c, c): getattr(row, c) for c in EVENT_COLUMNS}
    for column in _JSON_COLUMNS:
        values[column] = json.loads(values[column] or ("[]" if column == "alerts" else "{}"))
    return EventRecord(id=row.id, **values)


def pool_state(values: dict[str, Any]) -> PoolState:
    """A PoolState from the pool row's columns, by name."""
    return PoolState(**{c: values[c] for c in STATE_COLUMNS} | {"paused": bool(values["paused"])})


def hash_key(key: str) -> str:
    """A dedup key as stored: long keys, and keys with a character the database cannot hold, hashed."""
    if len(key) <= 200 and clean(key, None) == key:
        return key
    return "sha256:" + hashlib.sha256(key.encode(errors="surrogatepass")).hexdigest()


@functools.lru_cache(maxsize=64)
def claim_sql(keys: int) -> Any:
    """Claim ``keys`` dedup rows in one statement (the same SQL on SQLite and PostgreSQL): a new key is inserted,
    an expired one taken over, an unexpired one left alone; RETURNING lists the keys claimed."""
    rows = ", ".join(f"(:k{i}, :pool, :expires_at, :claim)" for i in range(keys))
    return text(f"INSERT INTO dedup (key, pool, expires_at, claim) VALUES {rows} ON CONFLICT (key) DO UPDATE "
                "SET pool = excluded.pool, expires_at = excluded.expires_at, claim = excluded.claim "
                "WHERE dedup.expires_at <= :now RETURNING key")


def claim_params(pool: str, keys: tuple[str, ...], now: float, expires_at: float,
                 claim: str) -> tuple[int, dict[str, Any]]:
    """How many distinct keys, and the parameters of ``claim_sql`` for them."""
    hashed = sorted({hash_key(k) for k in keys})
    params: dict[str, Any] = {f"k{i}": k for i, k in enumerate(hashed)}
    params.update(pool=pool, expires_at=expires_at, claim=claim, now=now)
    return len(hashed), params


def _postgres_settle_sql(keys: int) -> str:
    """PostgreSQL: claim ``keys`` dedup keys, append the settled event (or, with none claimed, the duplicate's
    columns ``d_*``) and point the pool at it, in one statement."""
    from sqlalchemy.dialects import postgresql

    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    values = []
    for column in tables.events.c:
        if column.primary_key:
            continue
        kind = column.type.compile(dialect=dialect)
        values.append(f"CASE WHEN n.c > 0 THEN CAST(:{column.name} AS {kind}) "
                      f"ELSE CAST(:d_{column.name} AS {kind}) END")
    claimed = (f"claimed AS ({claim_sql(keys).text}), n AS (SELECT count(*) AS c FROM claimed)" if keys
               else "n AS (SELECT 1 AS c)")
    return (f"WITH {claimed}, "
            f"ev AS (INSERT INTO events ({', '.join(EVENT_COLUMNS)}) SELECT {', '.join(values)} FROM n RETURNING id), "
            "up AS (UPDATE pools SET last_event_id = ev.id FROM ev, n WHERE pools.name = :pool AND n.c > 0) "
            "SELECT ev.id, n.c FROM ev, n")


class RawConnections:
    """The short cut's two calls on pooled DBAPI connections of ``engine``, in the driver's parameter style
    (named: ``:x`` for sqlite3, ``%(x)s`` for psycopg)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.read_sql = self._style(f"SELECT {', '.join('p.' + c for c in STATE_COLUMNS)}, e.to_count FROM pools p "
                                    "LEFT JOIN events e ON e.id = p.last_event_id WHERE p.name = :name")
        self.insert_event = self._style(f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) "
                                        f"VALUES ({', '.join(':' + c for c in EVENT_COLUMNS)}) RETURNING id")
        self.set_last_event = self._style("UPDATE pools SET last_event_id = :event WHERE name = :name")
        self.claim = functools.lru_cache(maxsize=64)(lambda n: self._style(claim_sql(n).text))
        self.settle_write = functools.lru_cache(maxsize=64)(lambda n: self._style(_postgres_settle_sql(n)))

    def _style(self, sql: str) -> str:
        return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql) if self.dialect == "postgresql" else sql

    def read(self, cur: Any, pool: str) -> tuple[PoolState, int | None] | None:
        """The pool's state and its last event's node count."""
        cur.execute(self.read_sql, {"name": pool})
        row = cur.fetchone()
        if row is None:
            return None
        return pool_state(dict(zip(STATE_COLUMNS, row[:len(STATE_COLUMNS)], strict=True))), row[-1]

    @contextmanager
    def cursor(self) -> Iterator[tuple[Any, Any]]:
        """A pooled DBAPI connection in autocommit mode and a cursor. A driver error is re-raised as SQLAlchemy's
        ``DBAPIError``; a broken connection, or one that cannot roll back, is dropped from the pool."""
        dbapi = self.engine.dialect.loaded_dbapi
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
        if isinstance(exc, self.engine.dialect.loaded_dbapi.Error) and (
                self.engine.dialect.is_disconnect(exc, fairy.dbapi_connection, cur)
                or (self.dialect == "sqlite" and broken_sqlite_connection(exc))):
            fairy.invalidate()
