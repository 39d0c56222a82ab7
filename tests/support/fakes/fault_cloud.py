"""A scriptable fake cloud (stdlib HTTP server in a thread) and a provider that talks to it over real HTTP."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from autoscaler.models import CloudStatus
from providers import Capabilities, Code, PermanentError, TemporaryError, Tracked
from tests.support.fakes.httpbase import FakeHttpServer, Request
from tests.support.fakes.httpbase import Reply as HttpReply


@dataclass
class Reply:
    """One scripted answer to POST /scale: a status, a delay, or a block until released."""

    status: int = 200
    delay: float = 0.0
    block: bool = False
    apply: bool = True  # a 200 takes effect when received, even if the answer comes late
    headers: dict[str, str] = field(default_factory=dict)


class FakeCloud(FakeHttpServer):
    """Holds one pool's size; answers /scale from a script (then 200), records every call it received."""

    name = "fake-cloud"

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.script: list[Reply] = []
        self.calls: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        super().__init__()

    def handle(self, request: Request) -> HttpReply:
        if request.method == "GET":
            return HttpReply(200, {"count": self.count})
        body = request.json() or {}
        with self.lock:
            reply = self.script.pop(0) if self.script else Reply()
            self.calls.append({"target": body.get("target"), "pid": body.get("pid"), "status": reply.status,
                               "time": time.time()})
            if reply.status == 200 and reply.apply:
                self.count = int(body["target"])  # accepted at once, answered (maybe) later
        if reply.block:
            self.release.wait(30)
        return HttpReply(reply.status, {"count": self.count} if reply.status == 200 else {"error": "nope"},
                         reply.headers, delay=reply.delay)

    def stop(self) -> None:
        self.release.set()
        super().stop()


class HttpTestProvider:
    """A provider over real HTTP: reads the size (GET), asks for a target (POST); timeouts and 429/5xx retryable."""

    capabilities = Capabilities()

    def __init__(self, url: str, timeout: float = 0.5) -> None:
        self.url = url
        self.timeout = timeout

    def check(self) -> None:
        """Nothing to check."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        try:
            resp = requests.get(f"{self.url}/pool", timeout=self.timeout)
        except requests.RequestException as exc:
            raise TemporaryError(f"cannot read the pool: {type(exc).__name__}", cloud_code="unreachable")
        return CloudStatus(current=int(resp.json()["count"]))

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        try:
            resp = requests.post(f"{self.url}/scale", json={"target": target, "pid": os.getpid()}, timeout=self.timeout)
        except requests.Timeout:
            raise TemporaryError(f"the cloud did not answer within {self.timeout}s", cloud_code="timeout")
        except requests.RequestException as exc:
            raise TemporaryError(f"cannot reach the cloud: {type(exc).__name__}", cloud_code="unreachable")
        if resp.status_code == 429 or resp.status_code >= 500:
            after = resp.headers.get("Retry-After")
            raise TemporaryError(f"the cloud answered {resp.status_code}", cloud_code=str(resp.status_code),
                                 code=Code.THROTTLED if resp.status_code == 429 else Code.UNAVAILABLE,
                                 retry_after=float(after) if after else None)
        if resp.status_code >= 400:
            raise PermanentError(f"the cloud refused: {resp.status_code}", cloud_code=str(resp.status_code))
        return target
