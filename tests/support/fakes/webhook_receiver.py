"""A throwaway webhook receiver: records each POST's time, headers and JSON body."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Headers, Reply, Request


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    at: float
    path: str
    headers: Headers
    body: dict[str, Any]


class WebhookReceiver(FakeHttpServer):
    """Answers 200 to every POST on 127.0.0.1 and keeps what came in; serving from construction on."""

    name = "webhook-receiver"

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.refuse: list[int] = []  # statuses for the next POSTs, one each (e.g. 409: another operation running)
        self._cond = threading.Condition()
        super().__init__()
        self.start()

    def wait(self, predicate: Any, timeout: float) -> Received | None:
        """The first request matching ``predicate`` (waiting up to ``timeout`` seconds), else None."""
        with self._cond:
            found: list[Received] = []

            def match() -> bool:
                found[:] = [r for r in self.received if predicate(r)]
                return bool(found)

            return found[0] if self._cond.wait_for(match, timeout) else None

    def handle(self, request: Request) -> Reply:
        if request.method != "POST":
            return Reply(501, "only POST")
        item = Received(time.monotonic(), request.path, request.headers, request.json() or {})
        with self._cond:
            self.received.append(item)
            self._cond.notify_all()
            status = self.refuse.pop(0) if self.refuse else 200
        return Reply(status, b"" if status == 200 else b'{"error": "another operation is in progress"}')
