"""Serve the real app on 127.0.0.1 in a thread (werkzeug), and a provider that records when it is called."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

from autoscaler.models import CloudStatus
from providers.base import NodePoolProvider, Tracked


@dataclass(frozen=True)
class Call:
    """One ``scale`` call: when (monotonic), from, to."""

    at: float
    current: int
    target: int


class RecordingProvider:
    """Wraps a real provider and notes each ``scale`` call, so a test can time the whole pipeline."""

    def __init__(self, inner: NodePoolProvider) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.calls: list[Call] = []
        self._cond = threading.Condition()

    def check(self) -> None:
        self.inner.check()

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        return self.inner.status(tracked, now)

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        with self._cond:
            self.calls.append(Call(time.monotonic(), current, target))
            self._cond.notify_all()
        return self.inner.scale(current, target, now, status)

    def wait_call(self, predicate: Any, timeout: float) -> Call | None:
        """The first call matching ``predicate``, waiting up to ``timeout`` seconds."""
        with self._cond:
            def found() -> Call | None:
                return next((c for c in self.calls if predicate(c)), None)
            self._cond.wait_for(lambda: found() is not None, timeout)
            return found()


class AppServer:
    """The Flask app behind a threaded werkzeug server on a free port."""

    def __init__(self, app: Flask) -> None:
        self.server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, name="app", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.server.server_port}"

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
