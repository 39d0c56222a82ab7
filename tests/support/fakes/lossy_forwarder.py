"""An HTTP forwarder that passes requests to a real server and can lose one answer: the request reaches the
server and takes effect, and the client sees the connection drop (the "accepted, answer lost" case)."""
from __future__ import annotations

import threading

import requests

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

_HOP = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


class LossyForwarder(FakeHttpServer):
    """Forwards to ``target``; ``lose_next(marker)`` drops the answer of the next request whose body or path holds
    ``marker`` (after the target handled it)."""

    name = "lossy-forwarder"

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target.rstrip("/")
        self.lost: list[str] = []
        self._marker: str | None = None
        self._lock = threading.Lock()

    def lose_next(self, marker: str) -> None:
        with self._lock:
            self._marker = marker

    def handle(self, request: Request) -> Reply:
        query = "&".join(f"{k}={v}" for k, values in request.query.items() for v in values)
        url = self.target + request.path + (f"?{query}" if query else "")
        headers = {k: v for k, v in request.headers.items() if k not in _HOP}
        answer = requests.request(request.method, url, data=request.raw, headers=headers, timeout=30)
        with self._lock:
            marker = self._marker
            if marker and (marker.encode() in request.raw or marker in request.path):
                self._marker = None
                self.lost.append(marker)
                return Reply(reset=True)
        return Reply(answer.status_code, answer.content,
                     content_type=answer.headers.get("Content-Type", "application/octet-stream"))
