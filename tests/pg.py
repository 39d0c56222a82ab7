"""A throw-away PostgreSQL database per test run (127.0.0.1:5432, user postgres, trust auth)."""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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
def temp_database() -> Iterator[str]:
    """Create a database with a random name, yield its name, and drop it (forcing out connections) after."""
    name = f"autoscaler_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
def _closing(store: SqlStore) -> Iterator[SqlStore]:
    try:
        yield store
    finally:
        store.close()
