"""A throwaway webhook receiver: records each POST's time, headers and JSON body."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    at: float
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class WebhookReceiver:
    """Answers 200 to every POST on 127.0.0.1 and keeps what came in."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True).start()

    @property
    def url(self) -> str:
        """Base URL of the receiver."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait(self, predicate: Any, timeout: float) -> Received | None:
        """The first request matching ``predicate`` (waiting up to ``timeout`` seconds), else None."""
        with self._cond:
            found: list[Received] = []

            def match() -> bool:
                found[:] = [r for r in self.received if predicate(r)]
                return bool(found)

            return found[0] if self._cond.wait_for(match, timeout) else None

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                item = Received(time.monotonic(), self.path, dict(self.headers.items()), json.loads(raw or b"{}"))
                with receiver._cond:
                    receiver.received.append(item)
                    receiver._cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence access logs
                return

        return Handler
