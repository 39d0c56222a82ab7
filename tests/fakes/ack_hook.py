"""A local stand-in for ACK trigger URLs (and any webhook): records calls, answers from a script."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OK_BODY = {"code": "200", "message": "", "requestId": "7E1A2B3C-0000-4000-8000-000000000001"}


@dataclass(frozen=True)
class Answer:
    """One scripted answer: HTTP status, JSON body (or raw text) and a delay before answering."""

    status: int = 200
    body: Any = field(default_factory=lambda: dict(OK_BODY))
    delay: float = 0.0


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


class FakeHookServer:
    """A threaded HTTP server on 127.0.0.1 with a queue of scripted answers; default answer is code 200."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.script: list[Answer] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str = "/hook/trigger", query: str = "") -> str:
        return f"{self.base_url}{path}{'?' + query if query else ''}"

    def then(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order; afterwards with the default."""
        with self._lock:
            self.script.extend(answers)

    def start(self) -> "FakeHookServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, call: Call) -> Answer:
        with self._lock:
            self.calls.append(call)
            return self.script.pop(0) if self.script else Answer()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                call = Call(self.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                            {k.lower(): v for k, v in self.headers.items()}, body)
                answer = fake._next(call)
                if answer.delay:
                    time.sleep(answer.delay)
                data = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
                payload = data.encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read ``calls`` instead."""

        return Handler
