"""Slow clients against the real app under gunicorn (issue 15, items 4 and 6): a dozen clients that send headers
and never finish the body do not stop /healthz, and a chunked body over the limit is refused whole."""
from __future__ import annotations

import copy
import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.servers import Service
from tests.support import AUTH, BASE_CONFIG, HMAC_SECRET, am_alert, am_payload

pytestmark = pytest.mark.slow
READ_TIMEOUT = 2.0
THREADS = 4


def _config(tmp_path: Path) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    cfg["server"]["auth"]["grafana_hmac"] = {"secret": HMAC_SECRET}
    cfg["server"]["max_body_bytes"] = 4096
    cfg["server"]["read_timeout"] = f"{READ_TIMEOUT:g}s"
    return cfg


def _stall(port: int, headers: dict[str, str]) -> socket.socket:
    """Send a request's headers and 10 bytes of a 3,000-byte body (within the limit), then nothing."""
    sock = socket.create_connection(("127.0.0.1", port))
    lines = ["POST /webhook/grafana HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             "Content-Length: 3000", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b'{"alerts":')
    sock.settimeout(READ_TIMEOUT + 5)
    return sock


def _status(sock: socket.socket) -> tuple[int | None, float]:
    """The status code the server answered on ``sock`` (None when it closed without one) and when."""
    try:
        first = sock.recv(200)
    except OSError:
        first = b""
    sock.close()
    return (int(first.split()[1]) if first.startswith(b"HTTP/") else None), time.monotonic()


def _healthz(url: str) -> float:
    start = time.monotonic()
    assert requests.get(f"{url}/healthz", timeout=READ_TIMEOUT * 4).status_code == 200
    return time.monotonic() - start


def test_a_dozen_stalled_bodies_do_not_stop_healthz(tmp_path: Path) -> None:
    with Service(_config(tmp_path), tmp_path, workers=1, env={"GUNICORN_THREADS": str(THREADS)}) as svc:
        port = int(svc.url.rsplit(":", 1)[1])
        # without credentials, or with a bearer token that is wrong: refused on the headers, the body never read
        socks = [_stall(port, {} if i % 2 else {"Authorization": "Bearer wrong"}) for i in range(12)]
        time.sleep(0.3)  # the scenario: the stalled clients reach the threads first (no answer to poll for)
        quick = _healthz(svc.url)
        print(f"/healthz with 12 stalled unauthenticated bodies: {quick:.3f}s")
        assert quick < 3.0  # at once (before: never, while the clients held every thread)
        answers = [_status(s) for s in socks]
        assert [code for code, _ in answers] == [401] * 12
        # with an HMAC signature, which needs the body: at most server.max_unauthenticated_reads (2) wait, at most
        # read_timeout, then 408; the others are answered 503 at once (issue 24: before, each held a thread)
        started = time.monotonic()
        socks = [_stall(port, {"X-Grafana-Alerting-Signature": "ab" * 32}) for _ in range(12)]
        time.sleep(0.3)  # likewise
        waited = _healthz(svc.url)
        answers = [_status(s) for s in socks]
        print(f"/healthz with 12 stalled HMAC bodies: {waited:.3f}s; last 408 after "
              f"{max(at for _, at in answers) - started:.2f}s")
        codes = [code for code, _ in answers]
        assert sorted(codes) == [408] * 2 + [503] * 10, codes
        assert max(at for _, at in answers) - started < READ_TIMEOUT + 3
        assert waited < 3.0  # at once: two threads of four stay free
        assert _healthz(svc.url) < 3.0


def test_chunked_body_over_the_limit_is_refused_whole_under_gunicorn(tmp_path: Path) -> None:
    with Service(_config(tmp_path), tmp_path, workers=1) as svc:
        host, port = "127.0.0.1", int(svc.url.rsplit(":", 1)[1])
        body = json.dumps(am_payload(am_alert(fingerprint="big", autoscaler_pool="gpu",
                                              autoscaler_action="scale_out")))
        big = (body[:-1] + ', "pad": "' + "x" * 5000 + '"}').encode()

        def send(raw: bytes) -> tuple[int, Any]:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            chunks = (raw[i:i + 1000] for i in range(0, len(raw), 1000))
            conn.request("POST", "/webhook/alertmanager", body=chunks, encode_chunked=True,
                         headers={**AUTH, "Content-Type": "application/json"})
            resp = conn.getresponse()
            status, data = resp.status, json.loads(resp.read() or b"null")
            conn.close()
            return status, data

        assert send(big)[0] == 413
        events = requests.get(f"{svc.url}/api/v1/events", headers=AUTH, timeout=5).json()["events"]
        assert events == []  # nothing of the cut body was processed
        status, data = send(body.encode())
        assert status == 200 and data["decisions"][0]["outcome"] == "scaled"


def test_forged_hmac_bodies_cannot_take_every_thread(tmp_path: Path) -> None:
    """32 connections with a well-formed but wrong signature, a current timestamp and one byte of a 100-byte body:
    at most ``server.max_unauthenticated_reads`` of them wait for their bodies, the rest are answered 503 at once,
    and /healthz and an authenticated sender keep their threads."""
    cfg = _config(tmp_path)
    cfg["server"]["auth"]["grafana_hmac"]["timestamp_header"] = "X-Grafana-Alerting-Timestamp"
    with Service(cfg, tmp_path, workers=1, env={"GUNICORN_THREADS": str(THREADS)}) as svc:
        port = int(svc.url.rsplit(":", 1)[1])
        started = time.monotonic()
        socks = []
        for _ in range(32):
            sock = socket.create_connection(("127.0.0.1", port))
            lines = ["POST /webhook/grafana HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
                     "Content-Length: 100", "X-Grafana-Alerting-Signature: " + "ab" * 32,
                     f"X-Grafana-Alerting-Timestamp: {int(time.time())}"]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b"{")
            sock.settimeout(READ_TIMEOUT + 10)
            socks.append(sock)
        time.sleep(0.3)
        assert _healthz(svc.url) < 1.5
        sent = requests.post(f"{svc.url}/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH,
                             timeout=READ_TIMEOUT)
        assert sent.status_code == 200
        answers = [_status(s) for s in socks]
        codes = [code for code, _ in answers]
        assert set(codes) <= {408, 503} and codes.count(408) <= 2, codes
        assert all(at - started < READ_TIMEOUT + 3 for code, at in answers if code == 503)
