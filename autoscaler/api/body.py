"""Reading a request body with a size limit and a time limit, the same whether it has a length or is chunked.

Werkzeug's own limit for a chunked body stops reading *at* ``max_content_length`` and hands the app a cut body;
here one byte more than the limit is asked for, so an oversized body is refused whole (413). And gunicorn's
``timeout`` does not cover a gthread worker blocked reading a body that never comes, so the socket gets a deadline
for the whole body (``server.read_timeout``): a client that sends headers and then trickles or stalls is answered
408 and its thread goes back to serving.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

from flask import g, request

CHUNK = 65536


class BodyError(Exception):
    """The body could not be read whole: ``status`` (408 or 413) and a message; the connection must close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class UnauthenticatedReads:
    """At most ``limit`` bodies read at once before their sender is known (per process): a signature check needs the
    body, so without a bound, connections with a well-formed but forged signature and a body that never comes would
    each hold a thread for ``read_timeout`` and leave none for /healthz or the real senders."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self.limit = limit

    def read(self, reader: Callable[[], bytes]) -> bytes:
        """``reader()`` in one of the slots; BodyError 503 at once when every slot is taken (a body already read,
        which costs no wait, needs none)."""
        if g.get("_body") is not None:
            return reader()
        if not self._slots.acquire(blocking=False):
            raise BodyError(503, f"{self.limit} request bodies of unauthenticated senders are being read already; "
                                 "try again")
        try:
            return reader()
        finally:
            self._slots.release()


def unread_body() -> bool:
    """Whether the request came with a body that was not read whole (refused before, or cut by an error)."""
    if g.get("_body") is not None:
        return False
    length = request.content_length
    return bool(length) or (length is None and request.headers.get("Transfer-Encoding", "").lower() == "chunked")


def close_after(resp: Any) -> Any:
    """End the connection after this answer when a body was left unread, instead of reading (and waiting for)
    the rest to find the next request: ``Connection: close``, and under gunicorn the socket's read side shut so
    its drain of the rest ends at once."""
    if not unread_body():
        return resp
    resp.headers["Connection"] = "close"  # gunicorn drops this header (hop-by-hop), hence the shutdown
    sock = request.environ.get("gunicorn.socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
    return resp


def read_body(limit: int, timeout: float) -> bytes:
    """The whole body (read once per request and kept), or BodyError: 413 past ``limit``, 408 past ``timeout``."""
    cached = g.get("_body")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    length = request.content_length
    if length is None and not request.environ.get("wsgi.input_terminated"):
        return b""  # neither a length nor a server that ends a chunked body: there is no body to read safely
    if length is not None and length > limit:
        raise BodyError(413, f"body larger than server.max_body_bytes ({limit})")
    # The server's own input, read up to the length, or (chunked: the server ends the stream where the body ends)
    # up to one byte more than the limit, to tell "at" from "over". Not werkzeug's wrapper: it turns a timeout
    # into "client disconnected" (400) and stops a chunked body at the limit without saying so.
    stream = request.environ["wsgi.input"]
    want = length if length is not None else limit + 1
    sock: Any = request.environ.get("gunicorn.socket")
    deadline = time.monotonic() + timeout
    parts: list[bytes] = []
    got = 0
    try:
        while got < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BodyError(408, f"body not received within server.read_timeout ({timeout:g}s)")
            if sock is not None:
                sock.settimeout(left)
            part = stream.read(min(CHUNK, want - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    except (socket.timeout, TimeoutError):
        raise BodyError(408, f"body not received within server.read_timeout ({timeout:g}s)") from None
    finally:
        if sock is not None:
            sock.settimeout(None)  # back to blocking, as gunicorn's gthread worker keeps it between reads
    if got > limit:
        raise BodyError(413, f"body larger than server.max_body_bytes ({limit})")
    body = b"".join(parts)
    g._body = body
    return body
