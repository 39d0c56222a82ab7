"""One HTTP exchange over ``requests``, bounded in time and in size: for every cloud call we send ourselves.

``requests`` (and urllib3 under it) applies its read timeout to each socket read, so an answer that trickles a
byte every half second never times out: a 2 s timeout held a decision for 40 s. And ``requests`` reads a whole
body into memory, so an answer of hundreds of MB grows the worker for good. :class:`BoundedAdapter` is a
transport adapter that makes the read timeout a total deadline for the whole exchange (sending, the status line,
the headers and the body: a watchdog shuts the connection's socket down once it passes) and reads the body itself,
in chunks, up to ``limit`` bytes after decompression, refusing it past that (:class:`AnswerTooLarge`).

Mounted on a ``requests.Session`` (see :func:`bounded_session`), it serves our webhook and ACK hook calls and the
Azure SDK's transport (azure-core hands the session ``timeout=(connect, read)``; the read part is the deadline).
The connect timeout stays what it is: connecting is one bounded step.

The same watchdog serves clients that hold a urllib3 pool manager of their own (the kubernetes client):
:func:`bound_pool_manager` gives it the watched connection pools and :func:`watched` bounds the calls of a block.
"""
from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Iterator

import requests
from requests.adapters import HTTPAdapter
from urllib3 import PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

MAX_ANSWER = 1024 * 1024  # bytes: the most of an answer we read (a hook's answer is a few hundred bytes)
_CHUNK = 64 * 1024


class AnswerTooLarge(requests.RequestException):
    """The answer's body passed the adapter's limit; nothing more of it was read."""

    def __init__(self, status: int, limit: int) -> None:
        super().__init__(f"answered HTTP {status} with a body of more than {_size(limit)}; refused after reading "
                         f"{_size(limit)}")
        self.status = status
        self.limit = limit


class AnswerTooSlow(requests.ReadTimeout):
    """No complete answer (status, headers and body) within the exchange's deadline."""


class _Watch:
    """The deadline of the exchange running on one thread: at its end, shut down the connection it uses."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._done = False
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:
                self._shut()

    def finish(self) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once; the connection is dropped
            except OSError:
                pass


_current = threading.local()


class _WatchedHTTPConnection(HTTPConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        watch: _Watch | None = getattr(_current, "watch", None)
        if watch is not None:
            watch.attach(self.sock)  # set by now when the connection is reused; else just after connect below
        super().request(*args, **kwargs)
        if watch is not None and self.sock is not None:
            watch.attach(self.sock)

    def connect(self) -> None:
        super().connect()
        watch: _Watch | None = getattr(_current, "watch", None)
        if watch is not None:
            watch.attach(self.sock)


class _WatchedHTTPSConnection(_WatchedHTTPConnection, HTTPSConnection):
    pass


class _WatchedPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _WatchedPool, "https": _WatchedHTTPSPool}


def bound_pool_manager(manager: PoolManager) -> PoolManager:
    """``manager`` (or a ``ProxyManager``) opening watched connections from now on: the calls it makes inside
    :func:`watched` end at that block's deadline. Call it before the manager opens its first pool."""
    manager.pool_classes_by_scheme = dict(_POOLS)
    return manager


@contextlib.contextmanager
def watched(seconds: float) -> Iterator[_Watch]:
    """Within the block, the connection of a watched pool this thread uses is shut down ``seconds`` after the block
    began (a blocked read returns at once); ``.expired`` on the yielded watch says whether that happened."""
    watch = _Watch(seconds)
    _current.watch = watch
    watch.start()
    try:
        yield watch
    finally:
        watch.finish()
        _current.watch = None


class BoundedAdapter(HTTPAdapter):
    """An adapter whose read timeout is a total deadline and whose answers are read up to ``limit`` bytes."""

    def __init__(self, limit: int = MAX_ANSWER, **kwargs: Any) -> None:
        self.limit = limit
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        seconds = _deadline(timeout)
        if seconds is None:
            raise ValueError("a bounded exchange needs a timeout")
        with watched(seconds) as watch:
            try:
                response = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert,
                                        proxies=proxies)
                body = self._read(response)
            except AnswerTooLarge:
                raise
            except requests.RequestException as exc:
                if watch.expired:
                    raise AnswerTooSlow(f"no complete answer within {seconds:g}s", request=request) from None
                raise exc
        response._content = body  # read here, bounded: what .content, .text, .json() and iter_content() give
        response._content_consumed = True  # type: ignore[attr-defined]
        return response

    def _read(self, response: requests.Response) -> bytes:
        """The body, decompressed, in chunks; :class:`AnswerTooLarge` (connection closed) past ``limit``."""
        parts: list[bytes] = []
        size = 0
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=True):
                size += len(chunk)
                if size > self.limit:
                    raise AnswerTooLarge(response.status_code, self.limit)
                parts.append(chunk)
        except AnswerTooLarge:
            response.close()  # not back to the pool: the rest of the body is never read
            raise
        except Exception as exc:
            response.close()
            if isinstance(exc, requests.RequestException):
                raise
            raise requests.ConnectionError(f"the answer broke off ({type(exc).__name__})") from None
        return b"".join(parts)


def bounded_session(limit: int = MAX_ANSWER) -> requests.Session:
    """A session whose every exchange is bounded (see :class:`BoundedAdapter`); no retries of its own."""
    return bound(requests.Session(), limit)


def is_bounded(session: requests.Session) -> bool:
    """Whether ``session``'s exchanges go through a :class:`BoundedAdapter` (:func:`bound` was applied)."""
    return isinstance(session.get_adapter("https://"), BoundedAdapter)


def bound(session: requests.Session, limit: int = MAX_ANSWER) -> requests.Session:
    """``session`` (a ``requests.Session`` or a subclass, such as google-auth's AuthorizedSession) with every
    exchange bounded from now on (see :class:`BoundedAdapter`); no retries of its own."""
    if not is_bounded(session):
        adapter = BoundedAdapter(limit, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


def _deadline(timeout: Any) -> float | None:
    """The exchange's deadline from a requests timeout: the read part of ``(connect, read)``, or the number."""
    if isinstance(timeout, tuple):
        timeout = timeout[1]
    return float(timeout) if timeout is not None else None


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"
