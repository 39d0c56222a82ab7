"""A trickling Entra key endpoint must not stall the worker (issue 34, item 7).

Tokens with made-up key IDs made the worker fetch the tenant's key set on the request path, under a lock, with a
5 s timeout per read that a trickle (a byte every half second) never trips: every thread of the gthread worker
ended up waiting on that lock, and ``/healthz`` and a valid static bearer token timed out at gunicorn's 60 s.
Now the key set is fetched off the request path with a total deadline; a request with an unknown key waits a
second or two at most and holds no lock others need.

The key endpoint here is a real local HTTP server (stdlib) that trickles its answer: the body, or the status line
and headers; the service runs under gunicorn with one worker of 4 threads, as shipped."""
from __future__ import annotations

import copy
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.servers import Service
from tests.support import AUTH, BASE_CONFIG, TOKEN, am_alert, am_payload

pytestmark = pytest.mark.slow

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
AUDIENCE = "api://gpu-autoscaler"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWKS = json.dumps({"keys": [{**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())),
                             "kid": "k1", "use": "sig"}]}).encode()


class TrickleServer(ThreadingHTTPServer):
    """Answers every GET with the key set, one byte every ``gap`` seconds: the body only, or the whole answer
    (status line and headers too). Notes when each request came and when its client went away."""

    daemon_threads = True

    def __init__(self, whole: bool, gap: float = 0.5) -> None:
        super().__init__(("127.0.0.1", 0), _Trickle)
        self.whole, self.gap = whole, gap
        self.stopping = threading.Event()
        self.came: list[float] = []
        self.left: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/keys"


class _Trickle(BaseHTTPRequestHandler):
    server: TrickleServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.came.append(time.monotonic())
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(JWKS)}\r\n\r\n".encode())
        if not self.server.whole:
            self.wfile.write(head)
            self.wfile.flush()
        try:
            for byte in (head if self.server.whole else b"") + JWKS:
                if self.server.stopping.wait(self.server.gap):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:  # the client went away
            self.server.left.append(time.monotonic())
            return
        self.server.left.append(time.monotonic())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(params=[False, True], ids=["trickled-body", "trickled-headers"])
def trickle(request: pytest.FixtureRequest) -> Iterator[TrickleServer]:
    server = TrickleServer(whole=request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()


def made_up_token(i: int) -> str:
    """A well-formed RS256 token whose key ID the tenant never published (anyone can make one)."""
    now = int(time.time())
    claims = {"aud": AUDIENCE, "iss": f"https://login.microsoftonline.com/{TENANT}/v2.0", "exp": now + 3600}
    return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": f"made-up-{i}"})


def timed(call: Any) -> tuple[float, int | str]:
    start = time.monotonic()
    try:
        status: int | str = call().status_code
    except requests.RequestException as exc:
        status = type(exc).__name__
    return time.monotonic() - start, status


def test_made_up_key_ids_do_not_stall_the_worker(tmp_path: Path, trickle: TrickleServer) -> None:
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    cfg["server"] = {"auth": {"bearer_tokens": [TOKEN],
                              "entra_id": {"tenant_id": TENANT, "audience": AUDIENCE, "jwks_url": trickle.url}}}
    hook = "/webhook/azure-monitor"
    with Service(cfg, tmp_path, workers=1) as svc, ThreadPoolExecutor(max_workers=12) as pool:
        def unknown(i: int) -> tuple[float, int | str]:
            return timed(lambda: requests.post(f"{svc.url}{hook}", json={}, timeout=12,
                                               headers={"Authorization": f"Bearer {made_up_token(i)}"}))

        attacks = [pool.submit(unknown, i) for i in range(8)]  # twice the worker's threads
        time.sleep(0.3)  # a real peer: the attacks reach the worker's threads first (no answer to poll for)
        health = pool.submit(timed, lambda: requests.get(f"{svc.url}/healthz", timeout=12))
        static = pool.submit(timed, lambda: requests.post(f"{svc.url}/webhook/alertmanager", headers=AUTH,
                                                          json=am_payload(am_alert()), timeout=12))
        health_s, health_status = health.result()
        static_s, static_status = static.result()
        results = [a.result() for a in attacks]

        assert health_status == 200 and health_s < 3.0, (health_s, health_status)
        assert static_status == 200 and static_s < 3.0, (static_s, static_status)
        # no keys could be had yet: 503 (a retry may pass), each within the short wait, none held to the trickle
        assert all(status == 503 for _, status in results), results
        assert max(s for s, _ in results) < 3.0, results
        assert len(trickle.came) == 1, trickle.came  # one fetch for all of them (at most one a minute)

        # the fetch itself ends at its total deadline (5 s), not when the trickle does (~3-4 min)
        deadline = time.monotonic() + 10
        while not trickle.left and time.monotonic() < deadline:
            time.sleep(0.1)  # polling a real peer (the background fetch) until its deadline
        assert trickle.left, "the key fetch was still reading the trickle 10 s after it began"
        assert trickle.left[0] - trickle.came[0] < 7.0, trickle.left[0] - trickle.came[0]
        assert timed(lambda: requests.get(f"{svc.url}/healthz", timeout=5))[1] == 200
