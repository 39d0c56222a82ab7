"""A scriptable fake cloud (stdlib HTTP server in a thread) and a provider that talks to it over real HTTP."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from autoscaler.models import CloudStatus
from providers import ProviderError, Tracked


@dataclass
class Reply:
    """One scripted answer to POST /scale: a status, a delay, or a block until released."""

    status: int = 200
    delay: float = 0.0
    block: bool = False
    apply: bool = True  # a 200 takes effect when received, even if the answer comes late
    headers: dict[str, str] = field(default_factory=dict)


class FakeCloud:
    """Holds one pool's size; answers /scale from a script (then 200), records every call it received."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.script: list[Reply] = []
        self.calls: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the caller died or gave up

            def do_GET(self) -> None:
                self._send(200, {"count": cloud.count})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                with cloud.lock:
                    reply = cloud.script.pop(0) if cloud.script else Reply()
                    call = {"target": body.get("target"), "pid": body.get("pid"), "status": reply.status,
                            "time": time.time()}
                    cloud.calls.append(call)
                    if reply.status == 200 and reply.apply:
                        cloud.count = int(body["target"])  # accepted at once, answered (maybe) later
                if reply.block:
                    cloud.release.wait(30)
                time.sleep(reply.delay)
                self._send(reply.status, {"count": cloud.count} if reply.status == 200 else {"error": "nope"},
                           reply.headers)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeCloud":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class HttpTestProvider:
    """A provider over real HTTP: reads the size (GET), asks for a target (POST); timeouts and 429/5xx retryable."""

    tracks_count = False

    def __init__(self, url: str, timeout: float = 0.5) -> None:
        self.url = url
        self.timeout = timeout

    def check(self) -> None:
        """Nothing to check."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        try:
            resp = requests.get(f"{self.url}/pool", timeout=self.timeout)
        except requests.RequestException as exc:
            raise ProviderError(f"cannot read the pool: {type(exc).__name__}", retryable=True, code="unreachable")
        return CloudStatus(current=int(resp.json()["count"]))

    def scale(self, current: int, target: int, now: float) -> int:
        try:
            resp = requests.post(f"{self.url}/scale", json={"target": target, "pid": os.getpid()}, timeout=self.timeout)
        except requests.Timeout:
            raise ProviderError(f"the cloud did not answer within {self.timeout}s", retryable=True, code="timeout")
        except requests.RequestException as exc:
            raise ProviderError(f"cannot reach the cloud: {type(exc).__name__}", retryable=True, code="unreachable")
        if resp.status_code == 429 or resp.status_code >= 500:
            after = resp.headers.get("Retry-After")
            raise ProviderError(f"the cloud answered {resp.status_code}", retryable=True, code=str(resp.status_code),
                                retry_after=float(after) if after else None)
        if resp.status_code >= 400:
            raise ProviderError(f"the cloud refused: {resp.status_code}", retryable=False, code=str(resp.status_code))
        return target
