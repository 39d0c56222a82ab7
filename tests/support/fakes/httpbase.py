"""The scaffolding every fake HTTP server in tests shares: a threaded stdlib server on 127.0.0.1:0.

A fake subclasses :class:`FakeHttpServer` and implements :meth:`handle`, which gets one parsed
:class:`Request` and returns a :class:`Reply`. Starting, stopping, the URL, reading the body, writing the answer
and keeping quiet are done here once.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit


class Headers(dict[str, str]):
    """Request headers; names are case-insensitive as in HTTP (stored lower-cased)."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__((k.lower(), v) for k, v in dict(items).items())

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name.lower() if isinstance(name, str) else name)

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


@dataclass
class Request:
    """One request as the fake saw it (header names case-insensitive)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Headers
    raw: bytes

    def param(self, name: str) -> str | None:
        """The first value of query parameter ``name``."""
        values = self.query.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        """The body parsed as JSON (None when empty or not JSON)."""
        try:
            return json.loads(self.raw) if self.raw else None
        except ValueError:
            return None


@dataclass
class Reply:
    """What the fake answers: a status, a body (dict/list as JSON, str or bytes as they are) and headers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering
    reset: bool = False  # drop the connection without an answer
    trickle: float = 0.0  # seconds between the answer's bytes (a stuck peer that still sends); 0: all at once
    trickle_head: bool = False  # with ``trickle``: the status line and headers too, else only the body
    content_type: str = "application/json"


class FakeHttpServer:
    """A threaded HTTP server on 127.0.0.1; use as a context manager or call start()/stop()."""

    name = "fake-http"

    def __init__(self) -> None:
        self.hung_up: list[float] = []  # monotonic times a client hung up on a trickled answer
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name=self.name,
                                        daemon=True)

    @property
    def url(self) -> str:
        """Base URL, without a trailing slash."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def handle(self, request: Request) -> Reply:
        """The answer to one request; subclasses implement it (it runs on the server's threads)."""
        raise NotImplementedError

    def _trickle(self, handler: BaseHTTPRequestHandler, reply: Reply, payload: bytes) -> None:
        """Write the answer a byte every ``reply.trickle`` seconds (the head at once unless ``trickle_head``)
        until it is all sent, the server stops or the client hangs up (recorded in :attr:`hung_up`)."""
        handler.close_connection = True
        head = (f"HTTP/1.1 {reply.status} {handler.responses.get(reply.status, ('',))[0]}\r\n"
                f"Content-Type: {reply.content_type}\r\nContent-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n").encode()
        slow = head + payload if reply.trickle_head else payload
        try:
            if not reply.trickle_head:
                handler.wfile.write(head)
            for byte in slow:
                handler.wfile.write(bytes([byte]))
                if self._stopping.wait(reply.trickle):
                    return
        except OSError:
            self.hung_up.append(time.monotonic())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                req = Request(self.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                              Headers(self.headers.items()), raw)
                reply = fake.handle(req)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.reset:  # no answer: the client sees the connection close
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass  # the client gave up first
                    return
                body = reply.body
                if isinstance(body, (dict, list)):
                    payload = json.dumps(body).encode()
                elif isinstance(body, str):
                    payload = body.encode()
                else:
                    payload = body or b""
                if reply.trickle:
                    fake._trickle(self, reply, payload)
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read what the fake recorded instead."""

        return Handler
