"""A cloud endpoint that misbehaves at the byte level (stdlib sockets): it trickles its answer a byte at a time, or
streams a body far larger than any hook answer. Records what each connection was sent and whether the client hung
up before the answer's end."""
from __future__ import annotations

import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from typing import Any

OK = b'{"code": "200", "message": "", "count": 3}'


@dataclass
class Served:
    """One request as the endpoint answered it."""

    request: bytes
    sent: int = 0  # bytes of the answer written
    cut: bool = False  # the client closed before the whole answer was written
    ended: float = 0.0  # monotonic time the connection ended


@dataclass
class Misbehaving:
    """``mode``: ``trickle_body`` (headers at once, then the body a byte every ``every`` s), ``trickle_head`` (the
    status line too), ``large`` (``size`` bytes of JSON-ish body, chunked), ``ok`` (a short 200 after ``delay``)."""

    mode: str = "trickle_body"
    every: float = 0.5
    size: int = 32 * 1024 * 1024
    delay: float = 0.0
    served: list[Served] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                fake._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "Misbehaving":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, conn: socket.socket) -> None:
        request = _read_request(conn)
        served = Served(request)
        self.served.append(served)
        try:
            if self.mode == "ok":
                time.sleep(self.delay)
                self._write(conn, served, _head(len(OK)) + OK)
            elif self.mode == "trickle_head":
                for byte in _head(len(OK)) + OK:
                    self._write(conn, served, bytes([byte]))
                    if self._stop.wait(self.every):
                        return
            elif self.mode == "trickle_body":
                body = b" " * 38 + OK  # leading blanks: valid JSON once it is all there
                self._write(conn, served, _head(len(body)))
                for byte in body:
                    if self._stop.wait(self.every):
                        return
                    self._write(conn, served, bytes([byte]))
            else:
                self._write(conn, served, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                          b"Transfer-Encoding: chunked\r\n\r\n")
                chunk = b"[" + b"0," * 32767 + b"0"  # 64 KiB of a JSON array that never ends
                while served.sent < self.size:
                    self._write(conn, served, b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self._write(conn, served, b"0\r\n\r\n")
        except OSError:
            served.cut = True
        finally:
            served.ended = time.monotonic()

    @staticmethod
    def _write(conn: socket.socket, served: Served, data: bytes) -> None:
        conn.sendall(data)
        served.sent += len(data)


def _head(length: int) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def _read_request(conn: socket.socket) -> bytes:
    """The request's head and body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return data
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            break
        body += part
    return head + b"\r\n\r\n" + body
