"""A gunicorn worker that restarts while PostgreSQL is down boots anyway: alive, not ready, 503 to webhooks, and
ready by itself once the database answers again. The very first start with the database down fails fast."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from tests.support import pg
from tests.support.fakes.tcpproxy import TcpProxy
from tests.support.pipeline import wait_for
from tests.support.servers import Service, free_port, wait_http

pytestmark = pytest.mark.slow
TOKEN = "boot-degraded-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config(store_url: str) -> dict[str, Any]:
    return {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "lock_wait": "2s"},
        "store": {"url": store_url, "connect_timeout": "2s"},
        "defaults": {"scale_out": {"step": 1, "cooldown": "5m"}, "dedup_window": "10m"},
        "rules": [{"match": {"alertname": "GPUUtilizationHigh"}, "pool": "sim", "action": "scale_out"}],
        "pools": [{"name": "sim", "provider": "simulated", "min": 0, "max": 8,
                   "simulated": {"initial_count": 1, "provision_seconds": 0}}],
    }


def notification(fingerprint: str) -> dict[str, Any]:
    labels = {"alertname": "GPUUtilizationHigh", "cluster": "prod"}
    return {"version": "4", "groupKey": "{}:{alertname=\"GPUUtilizationHigh\"}", "status": "firing",
            "receiver": "autoscaler", "groupLabels": {"alertname": "GPUUtilizationHigh"}, "commonLabels": labels,
            "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "labels": labels, "annotations": {},
                        "startsAt": "2030-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}]}


def post(base: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{base}/webhook/alertmanager", json=body, headers=AUTH, timeout=30)


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_worker_restarted_while_postgres_is_down_serves_503_then_recovers(tmp_path: Path, database: str) -> None:
    with TcpProxy(pg.HOST, pg.PORT) as proxy:
        service = Service(config(pg.url_for(database, "127.0.0.1", proxy.port)), tmp_path, workers=1).start()
        try:
            wait_http(f"{service.url}/readyz", 20, proc=service.proc)
            (old,) = service.worker_pids()

            proxy.close()  # the database goes away ...
            os.kill(old, signal.SIGKILL)  # ... and the worker dies: gunicorn forks a new one
            wait_for(lambda: service.worker_pids() - {old}, 20, "a new worker")
            wait_http(f"{service.url}/healthz", 30, proc=service.proc)
            assert service.proc is not None and service.proc.poll() is None, service.tail()

            ready = requests.get(f"{service.url}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.headers.get("Retry-After")
            answer = post(service.url, notification("b00710000000001"))
            assert answer.status_code == 503, answer.text
            assert answer.headers.get("Retry-After")
            assert answer.headers["Content-Type"].startswith("application/json")
            assert "error" in answer.json() and "Traceback" not in answer.text
            scrape = requests.get(f"{service.url}/metrics", timeout=10).text
            assert "gpu_autoscaler_store_up 0.0" in scrape

            proxy.open()  # the database is back: the same worker becomes ready by itself
            wait_http(f"{service.url}/readyz", 30, proc=service.proc)
            acted = post(service.url, notification("b00710000000001"))
            assert acted.status_code == 200, acted.text
            (decision,) = acted.json()["decisions"]
            assert decision["outcome"] == "scaled", decision
            assert service.proc.poll() is None
            assert service.read_log().count("store: set up at last") == 1, service.tail()
        finally:
            service.stop()


def test_first_start_with_postgres_down_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    pg.require_postgres()
    service = Service(config(pg.url_for("nowhere", "127.0.0.1", free_port())), tmp_path, workers=1).spawn()
    try:
        assert service.proc is not None
        code = service.proc.wait(timeout=30)
        assert code != 0
        log = service.read_log()
        assert "store.url" in log and "unreachable" in log, log[-2000:]
        assert "Traceback" not in log, log[-2000:]
    finally:
        service.stop()
