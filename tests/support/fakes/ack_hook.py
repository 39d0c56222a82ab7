"""A local stand-in for ACK trigger URLs (and any webhook): records calls, answers from a script."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

OK_BODY = {"code": "200", "message": "", "requestId": "7E1A2B3C-0000-4000-8000-000000000001"}


@dataclass(frozen=True)
class Answer:
    """One scripted answer: HTTP status, JSON body (or raw text), headers and a delay before answering."""

    status: int = 200
    body: Any = field(default_factory=lambda: dict(OK_BODY))
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class Call(Request):
    """One request the fake received (``body`` is the raw bytes)."""

    @property
    def body(self) -> bytes:
        return self.raw


class FakeHookServer(FakeHttpServer):
    """A threaded HTTP server on 127.0.0.1 with a queue of scripted answers; default answer is code 200."""

    name = "fake-hook"

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.script: list[Answer] = []
        self._lock = threading.Lock()
        super().__init__()

    def hook_url(self, path: str = "/hook/trigger", query: str = "") -> str:
        """A URL on this server with ``path`` and ``query``."""
        return f"{self.url}{path}{'?' + query if query else ''}"

    def then(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order; afterwards with the default."""
        with self._lock:
            self.script.extend(answers)

    def handle(self, request: Request) -> Reply:
        with self._lock:
            self.calls.append(Call(request.method, request.path, request.query, request.headers, request.raw))
            answer = self.script.pop(0) if self.script else Answer()
        return Reply(answer.status, answer.body, dict(answer.headers), delay=answer.delay)
