"""A throw-away PostgreSQL database per test run (127.0.0.1:5432, user postgres, trust auth)."""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from autoscaler.store import SqlStore, Store
from autoscaler.store.memory import MemoryStore

ADMIN_DSN = os.environ.get("AUTOSCALER_TEST_PG", "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3")
_INFO = conninfo_to_dict(ADMIN_DSN)
HOST, PORT, USER = str(_INFO.get("host", "127.0.0.1")), int(_INFO.get("port", 5432)), str(_INFO.get("user", "postgres"))


def unreachable_reason() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can."""
    try:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL on {HOST}:{PORT} is unreachable ({type(exc).__name__}: {str(exc).strip()[:200]})"
    return None


def require_postgres() -> None:
    """Skip (with the reason) when PostgreSQL is unreachable; in CI (CI=true) fail instead."""
    reason = unreachable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true, so PostgreSQL tests must run")
    print(f"SKIP: {reason}")
    pytest.skip(reason)


def url_for(name: str, host: str = HOST, port: int = PORT) -> str:
    """The ``store.url`` of a database, plain ``postgresql://`` as an operator would write it."""
    return f"postgresql://{USER}@{host}:{port}/{name}"


@contextmanager
def temp_database(clock: bool = False) -> Iterator[str]:
    """Create a database with a random name, yield its name, and drop it (forcing out connections) after;
    ``clock``: with a clock a test sets (``DbClock``)."""
    name = f"autoscaler_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        if clock:
            _settable_clock(name)
        yield name
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class DbClock:
    """A database's clock a test sets (``set``), like ``tests.support.FakeClock`` for the service's: the store
    writes and judges leases and dedup claims on PostgreSQL's ``now()`` (``autoscaler/store/expiry.py``), which in
    a database made by ``temp_database(clock=True)`` is this one's while set, the real one before. Nothing of ours
    is patched: the database's own ``search_path`` finds a ``now()`` of schema ``test_clock`` before pg_catalog's."""

    def __init__(self, name: str) -> None:
        self.dsn = f"host={HOST} port={PORT} user={USER} dbname={name} connect_timeout=3"

    def set(self, at: float) -> None:
        """From now on, the database's ``now()`` is ``at`` (seconds since the epoch)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE test_clock.wall SET at = %s", (at,))


_CLOCK_SQL = (
    "CREATE SCHEMA test_clock",
    "CREATE TABLE test_clock.wall (at double precision)",
    "INSERT INTO test_clock.wall VALUES (NULL)",
    ("CREATE FUNCTION test_clock.now() RETURNS timestamptz LANGUAGE sql STABLE AS "
     "'SELECT coalesce((SELECT pg_catalog.to_timestamp(at) FROM test_clock.wall), pg_catalog.now())'"),
)


def _settable_clock(name: str) -> None:
    """Give database ``name`` a clock ``DbClock`` sets (see there)."""
    with psycopg.connect(f"host={HOST} port={PORT} user={USER} dbname={name} connect_timeout=3",
                         autocommit=True) as conn:
        for statement in _CLOCK_SQL:
            conn.execute(statement)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET search_path = "$user", public, test_clock, pg_catalog')


@contextmanager
def each_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """A fresh store of ``kind``: ``memory``, ``sqlite`` (a file under ``tmp_path``) or ``postgresql`` (a throw-away
    database; skipped when PostgreSQL is unreachable, failed under CI=true); closed after."""
    if kind == "memory":
        made: Store = MemoryStore()
        yield made
        made.close()
    elif kind == "sqlite":
        with _closing(SqlStore(f"sqlite:///{tmp_path}/s.db")) as made:
            yield made
    else:
        require_postgres()
        with temp_database() as name, _closing(SqlStore(url_for(name))) as made:
            yield made


@contextmanager
def each_clocked_store(kind: str, tmp_path: Path) -> Iterator[tuple[Store, Callable[[float], None]]]:
    """``each_store``, with what sets the store's clock: PostgreSQL's (``DbClock``); for SQLite and memory, where
    the caller's ``now`` is the clock, nothing."""
    if kind != "postgresql":
        with each_store(kind, tmp_path) as made:
            yield made, lambda at: None
        return
    require_postgres()
    with temp_database(clock=True) as name, _closing(SqlStore(url_for(name))) as store:
        yield store, DbClock(name).set


@contextmanager
def _closing(store: SqlStore) -> Iterator[SqlStore]:
    try:
        yield store
    finally:
        store.close()
