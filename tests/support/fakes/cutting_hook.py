"""A pool's webhook that cuts the database (a TcpProxy in front of it) when it takes the first change, and lets it
back a few seconds later: the database away exactly while the cloud acts."""
from __future__ import annotations

import threading
import time
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request
from tests.support.fakes.tcpproxy import TcpProxy


class CuttingHook(FakeHttpServer):
    """The pool's webhook: takes each change (200 at once) and, on the first, cuts the database for ``down``
    seconds."""

    name = "cutting-hook"

    def __init__(self, proxy: TcpProxy, down: float) -> None:
        self.proxy = proxy
        self.down = down
        self.calls: list[dict[str, Any]] = []
        self.cut_at: float | None = None
        self.back_at: float | None = None
        super().__init__()

    def handle(self, request: Request) -> Reply:
        self.calls.append(request.json() or {})
        if self.cut_at is None:
            self.proxy.close()
            self.cut_at = time.monotonic()
            threading.Timer(self.down, self._back).start()
        return Reply(200, {"accepted": True})

    def _back(self) -> None:
        self.proxy.open()
        self.back_at = time.monotonic()
