"""A client-side deadline for each PostgreSQL store call, so that a path that stops forwarding cannot hold it.

``statement_timeout`` is the server's: a query that never reaches it (a hung PgBouncer or sidecar, a proxy that
stops forwarding while its kernel still acknowledges) is never timed out, and neither ``tcp_user_timeout`` (the
data is acknowledged) nor keepalives (the probes are answered) notice. Alerts then waited in the pool's pre-ping
until forwarding resumed, and acted after their senders had given up. Here each store call (``SqlStore``'s
transactions, reads and readiness probe) runs inside :meth:`Deadlines.call`; the connection it uses is attached to
the call when it is opened or checked out of the pool, and once the call has held it ``seconds`` a watchdog shuts
its socket down: the blocked read returns at once, the driver raises, SQLAlchemy drops the connection and the call
is ``StoreUnavailable`` (503). The transaction never committed is rolled back by the server when the connection
goes. The pool's pre-ping runs here, in the checkout event, so that it is watched too (``pool_pre_ping`` pings
before any event could attach the connection).
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
import weakref
from typing import Any, Iterator

from sqlalchemy import Engine, event
from sqlalchemy.exc import InvalidatePoolError


class _Watch:
    """One call's deadline: ``seconds`` after a connection is attached, shut that connection's socket down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._conn: Any = None
        self._timer: threading.Timer | None = None

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            if self.expired:
                _shut(conn)
            elif self._timer is None:  # the deadline counts from the call's first connection
                self._timer = threading.Timer(self.seconds, self._expire)
                self._timer.daemon = True
                self._timer.start()

    def detach(self, conn: Any) -> None:
        """``conn`` goes back to the pool or is closed: never shut it (or a socket that reuses its number)."""
        with self._lock:
            if self._conn is conn:
                self._conn = None

    def finish(self) -> None:
        with self._lock:
            self._conn = None
            if self._timer is not None:
                self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._conn is not None:
                _shut(self._conn)


def _shut(conn: Any) -> None:
    """Shut down the socket of a psycopg connection (libpq owns it: shut a duplicate, the shutdown is shared)."""
    try:
        fd = os.dup(conn.fileno())
    except Exception:  # noqa: BLE001 - closed already: nothing left to cut
        return
    with socket.socket(fileno=fd) as sock:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Deadlines:
    """The deadlines of one engine's calls (see the module's docstring)."""

    def __init__(self, engine: Engine, seconds: float) -> None:
        self.seconds = seconds
        self._local = threading.local()
        dialect = engine.dialect

        @event.listens_for(engine, "connect", insert=True)  # before the session settings are SET
        def _connected(dbapi_conn: Any, record: Any) -> None:
            record.info["fresh"] = True
            self._attach(dbapi_conn)

        @event.listens_for(engine, "checkout")
        def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
            self._attach(dbapi_conn)
            if record.info.pop("fresh", False):
                return
            try:
                dialect.do_ping(dbapi_conn)
            except dialect.loaded_dbapi.Error as exc:
                watch = getattr(self._local, "watch", None)
                if (watch is not None and watch.expired) or not dialect.is_disconnect(exc, dbapi_conn, None):
                    raise  # the call's deadline passed: no second connection; or not a lost connection
                raise InvalidatePoolError() from exc  # as pool_pre_ping: the server went away, reconnect once

        for name in ("checkin", "invalidate", "close", "detach"):
            event.listen(engine, name, self._detach)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One store call under the deadline (calls do not nest)."""
        watch = self._local.watch = _Watch(self.seconds)
        try:
            yield
        finally:
            watch.finish()
            self._local.watch = None

    def _attach(self, dbapi_conn: Any) -> None:
        watch: _Watch | None = getattr(self._local, "watch", None)
        if watch is not None:
            watch.attach(dbapi_conn)

    def _detach(self, dbapi_conn: Any, *_: Any) -> None:
        watch: _Watch | None = getattr(self._local, "watch", None)
        if watch is not None:
            watch.detach(dbapi_conn)


_BY_ENGINE: weakref.WeakKeyDictionary[Engine, Deadlines] = weakref.WeakKeyDictionary()


def install(engine: Engine, seconds: float) -> None:
    """Give ``engine`` (pooled PostgreSQL, without ``pool_pre_ping``: it pings here) a deadline per call."""
    _BY_ENGINE[engine] = Deadlines(engine, seconds)


def call(engine: Engine) -> contextlib.AbstractContextManager[None]:
    """The deadline of one store call on ``engine`` (nothing for an engine without one: SQLite)."""
    found = _BY_ENGINE.get(engine)
    return found.call() if found is not None else contextlib.nullcontext()
