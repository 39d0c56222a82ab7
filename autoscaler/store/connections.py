"""SQLAlchemy engines for the store: SQLite (WAL, BEGIN IMMEDIATE) and PostgreSQL (psycopg 3, bounded waits)."""
from __future__ import annotations

import os
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from autoscaler.config import ServerConfig, StoreConfig
from autoscaler.store import deadline
from autoscaler.store.sqlite_file import pinned


def _default(section: type[BaseModel], name: str) -> Any:
    """A setting's default as the config declares it, so that each is written once."""
    return section.model_fields[name].default


@dataclass(frozen=True)
class StoreOptions:
    """How long the store may wait, and how many connections one process keeps (PostgreSQL); the defaults are the
    config's (``server.lock_wait`` and the ``store:`` section)."""

    lock_wait: float = _default(ServerConfig, "lock_wait")  # lock_timeout: longest wait for another's row lock
    statement_timeout: float = _default(StoreConfig, "statement_timeout")  # longest any single statement may run
    connect_timeout: float = _default(StoreConfig, "connect_timeout")  # longest a new connection may take to open
    pool_size: int = _default(StoreConfig, "pool_size")  # connections kept open per process (gunicorn worker)
    max_overflow: int = _default(StoreConfig, "max_overflow")  # extra connections under a burst, closed when returned
    probe_interval: float = 2.0  # SQLite: how often (at most) to ask whether the file is still writable

    @classmethod
    def of(cls, store: StoreConfig, lock_wait: float = _default(ServerConfig, "lock_wait")) -> StoreOptions:
        """The options of a ``store:`` section (and ``server.lock_wait``)."""
        return cls(lock_wait=lock_wait, statement_timeout=store.statement_timeout,
                   connect_timeout=store.connect_timeout, pool_size=store.pool_size, max_overflow=store.max_overflow)


def normalize_url(url: str) -> URL:
    """``postgresql://`` (and ``postgres://``) mean psycopg 3; other drivers are kept as written."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1) if url.startswith("postgres://") else url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _wal(cursor: Any) -> None:
    """Switch the file to WAL; retried, because SQLite answers "locked" at once (no busy wait) when two fresh
    connections both hold a read lock and both want the exclusive lock the switch needs."""
    import sqlite3

    for attempt in Retrying(stop=stop_after_delay(30), wait=wait_random(0.005, 0.05), reraise=True,
                            retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError)
                                                     and "locked" in str(e))):
        with attempt:
            cursor.execute("PRAGMA journal_mode=WAL")


_BROKEN_SQLITE = ("SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN")


def broken_sqlite_connection(exc: BaseException) -> bool:
    """Whether a SQLite error means the connection itself is of no more use (opened read-only, its file gone or
    failing): such a connection is dropped from the pool, so that a new one is opened once the file is fine again."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    return name.startswith(_BROKEN_SQLITE) or "readonly database" in text or "disk i/o error" in text \
        or "unable to open database file" in text


def sqlite_file(url: URL) -> str | None:
    """The absolute path of a file database (None for ``:memory:`` and ``file:`` URIs)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query:
        return None
    return os.path.abspath(database)


def sqlite_engine(url: URL, options: StoreOptions, **kwargs: Any) -> Engine:
    """One writer at a time: every transaction starts with BEGIN IMMEDIATE and waits up to 30 s for the file lock.

    The file is created here, once; every connection then opens it with ``mode=rw``, so a file removed under a
    running service is an error, never a fresh empty database.
    """
    path = sqlite_file(url)
    if path is None and url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        os.makedirs(os.path.dirname(os.path.abspath(url.database)), exist_ok=True)  # a path with query options
    if path is not None and pinned(path) is None:  # a gunicorn worker creates neither (see ``sqlite_file.pin``)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            with open(path, "ab"):  # an empty file is an empty SQLite database
                pass
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs)

    if path is not None:
        @event.listens_for(engine, "do_connect")
        def _existing_only(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
            if cargs and os.path.abspath(str(cargs[0])) == path:
                cargs[0] = f"file:{urllib.parse.quote(path)}?mode=rw"
                cparams["uri"] = True

    @event.listens_for(engine, "handle_error")
    def _drop_broken(ctx: Any) -> None:
        if ctx.original_exception is not None and broken_sqlite_connection(ctx.original_exception):
            ctx.is_disconnect = True  # invalidate: never handed out again
            # SQLAlchemy closes an invalidated connection without the failed statement's cursor; on SQLite an open
            # statement keeps the closed connection, and its transaction's write lock, alive until the cursor is
            # collected (every other writer meanwhile waits its busy timeout and fails "database is locked").
            # (ExceptionContext names a ``cursor`` that SQLAlchemy 2.0 never sets: the execution context's is it.)
            cursor = getattr(ctx, "cursor", None) or getattr(ctx.execution_context, "cursor", None)
            if cursor is not None:
                try:
                    cursor.close()
                except Exception:  # noqa: BLE001 - the connection may be gone already; the error raised says why
                    pass

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        _wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Take the write lock at BEGIN: no deadlock between two readers that both want to write. A connection marked
        # ``read_only`` (one SELECT, never a write) begins nothing: the statement is its own read transaction, and
        # it does not wait for writers.
        if not conn.get_execution_options().get("read_only"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


#: PostgreSQL: a store call may hold its connection ``statement_timeout`` and this long (seconds) before the client
#: cuts it (store/deadline.py): a slow statement meets the server's own timeout first, a silent path this one.
CALL_GRACE = 1.0


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def postgres_engine(url: URL, options: StoreOptions, *, pooled: bool = True) -> Engine:
    """READ COMMITTED, pre-ping, and every wait bounded: connect, pool checkout, lock, statement, TCP, and (pooled)
    each store call's whole use of its connection (``deadline``: a path that stops forwarding)."""
    connect_args: dict[str, Any] = {
        "connect_timeout": max(1, int(options.connect_timeout + 0.999)),
        "application_name": "gpu-pool-autoscaler",
        # A peer that stops answering (network partition) must not hang a query: the kernel gives up on
        # unacknowledged data after tcp_user_timeout, and keepalives find idle dead connections.
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": _ms(options.statement_timeout + options.connect_timeout),
    }
    kwargs: dict[str, Any] = {"isolation_level": "READ COMMITTED", "connect_args": connect_args}
    if pooled:  # pinged before each use by the call's deadline (store/deadline.py), not by pool_pre_ping
        kwargs.update(pool_size=options.pool_size, max_overflow=options.max_overflow,
                      pool_timeout=max(1.0, options.lock_wait), pool_recycle=1800)
    else:
        from sqlalchemy.pool import NullPool

        kwargs["poolclass"] = NullPool
    engine = create_engine(url, **kwargs)
    if pooled:
        deadline.install(engine, options.statement_timeout + CALL_GRACE)
    settings = (("lock_timeout", _ms(options.lock_wait)), ("statement_timeout", _ms(options.statement_timeout)),
                ("idle_in_transaction_session_timeout", _ms(max(60.0, options.statement_timeout * 6))))

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # SET rather than libpq startup options, so that it also works behind PgBouncer in session mode.
        with dbapi_conn.cursor() as cur:
            for name, value in settings:
                cur.execute(f"SET {name} = {int(value)}")
        dbapi_conn.commit()

    return engine


def make_engine(url: str, options: StoreOptions) -> Engine:
    """The engine for a ``store.url``."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        return sqlite_engine(parsed, options)
    if parsed.get_backend_name() == "postgresql":
        return postgres_engine(parsed, options)
    raise ValueError(f"unsupported store url scheme {parsed.drivername!r}: use sqlite:/// or postgresql://")


def after_fork_dispose(engine: Engine) -> None:
    """A forked child (gunicorn --preload) must not reuse the parent's sockets: drop them without closing."""
    ref = weakref.ref(engine)

    def _child() -> None:
        alive = ref()
        if alive is not None:
            alive.dispose(close=False)

    os.register_at_fork(after_in_child=_child)
