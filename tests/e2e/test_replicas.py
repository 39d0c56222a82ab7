"""Two real gunicorn replicas on one PostgreSQL: one decision per pool, whichever replica gets the alert."""
from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from tests.support import pg
from tests.support.servers import Service, wait_http
from tests.support.fakes.tcpproxy import TcpProxy

pytestmark = pytest.mark.slow
TOKEN = "replica-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "pg-password-never-shown"


def config(store_url: str) -> dict[str, Any]:
    """A config with one simulated pool, five-minute cooldowns and a ten-minute dedup window."""
    cfg = {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "lock_wait": "5s"},
        "store": {"url": store_url, "retain_events": "30d", "connect_timeout": "2s"},
        "defaults": {"scale_out": {"step": 1, "cooldown": "5m"},
                     "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"},
                     "dedup_window": "10m"},
        "rules": [{"match": {"alertname": "GPUUtilizationHigh"}, "pool": "sim", "action": "scale_out"}],
        "pools": [{"name": "sim", "provider": "simulated", "min": 0, "max": 8,
                   "simulated": {"initial_count": 1, "provision_seconds": 0}}],
    }
    return cfg


def notification(fingerprint: str, starts_at: str = "2030-01-01T00:00:00Z") -> dict[str, Any]:
    """An Alertmanager (v4) notification with one firing alert."""
    labels = {"alertname": "GPUUtilizationHigh", "cluster": "prod"}
    return {"version": "4", "groupKey": "{}:{alertname=\"GPUUtilizationHigh\"}", "status": "firing",
            "receiver": "autoscaler", "groupLabels": {"alertname": "GPUUtilizationHigh"}, "commonLabels": labels,
            "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "labels": labels, "annotations": {"value": "93"},
                        "startsAt": starts_at, "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}]}


def post(base: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{base}/webhook/alertmanager", json=body, headers=AUTH, timeout=30)


@pytest.fixture
def store_url() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield pg.url_for(name)


@pytest.fixture
def replicas(tmp_path: Path, store_url: str) -> Iterator[list[Service]]:
    instances = [Service(config(store_url), tmp_path, workers=2) for _ in range(2)]
    try:
        for inst in instances:  # both start (and migrate) at the same instant
            inst.spawn()
        for inst in instances:
            inst.wait_ready()
        yield instances
    finally:
        for inst in instances:
            inst.stop()


def test_200_identical_notifications_across_two_replicas_scale_once(replicas: list[Service]) -> None:
    body = notification("f00dfeed00000001")
    bases = [r.url for r in replicas]
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda i: post(bases[i % 2], body), range(200)))
    assert [a.status_code for a in answers] == [200] * 200, [a.text for a in answers if a.status_code != 200][:3]
    decisions = [d for a in answers for d in a.json()["decisions"]]
    outcomes = Counter(d["outcome"] for d in decisions)
    assert len(decisions) == 200
    assert outcomes["scaled"] == 1, outcomes
    assert outcomes["skipped_duplicate"] == 199, outcomes
    scaled = next(d for d in decisions if d["outcome"] == "scaled")
    assert (scaled["from"], scaled["to"]) == (1, 2)

    events = requests.get(f"{bases[0]}/api/v1/events?limit=1000", headers=AUTH, timeout=10).json()["events"]
    assert len(events) == 200
    assert {e["id"] for e in events} == {d["event_id"] for d in decisions}
    assert Counter(e["outcome"] for e in events) == outcomes
    pools = [requests.get(f"{b}/api/v1/pools/sim", headers=AUTH, timeout=10).json() for b in bases]
    assert [p["current"] for p in pools] == [2, 2]

    for inst in replicas:
        inst.restart()
    again = post(bases[1], notification("f00dfeed00000002")).json()["decisions"]
    assert [d["outcome"] for d in again] == ["skipped_cooldown"], again
    assert again[0]["from"] == 2
    repeat = post(bases[0], body).json()["decisions"]
    assert [d["outcome"] for d in repeat] == ["skipped_duplicate"], repeat
    for base in bases:
        assert requests.get(f"{base}/readyz", timeout=10).status_code == 200


def test_connection_loss_answers_503_and_recovers(tmp_path: Path, store_url: str) -> None:
    with TcpProxy(pg.HOST, pg.PORT) as proxy:
        # Trust auth ignores the password, so the URL can carry one that must never be shown.
        url = store_url.replace(f"{pg.USER}@{pg.HOST}:{pg.PORT}/", f"{pg.USER}:{SECRET}@{pg.HOST}:{proxy.port}/")
        with Service(config(url), tmp_path, workers=2) as inst:
            wait_http(f"{inst.url}/readyz", 10)
            proxy.close()
            for _ in range(4):  # every worker, whichever gets the request
                ready = requests.get(f"{inst.url}/readyz", timeout=30)
                assert ready.status_code == 503
                assert "postgres" not in ready.text.lower()
            answer = post(inst.url, notification("deadbeef00000001"))
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["Retry-After"]) > 0
            assert "error" in answer.json()

            proxy.open()
            wait_http(f"{inst.url}/readyz", 15)
            for _ in range(4):
                assert requests.get(f"{inst.url}/readyz", timeout=10).status_code == 200
            # The notification answered 503 left nothing behind: its retry acts.
            retry = post(inst.url, notification("deadbeef00000001"))
            assert retry.status_code == 200, retry.text
            assert [d["outcome"] for d in retry.json()["decisions"]] == ["scaled"], json.dumps(retry.json())

            # Inside the cooldown the short cut answers (one transaction on a raw pooled connection); its pooled
            # connections break with the next outage and recover after it the same way.
            for i in range(4):
                quick = post(inst.url, notification(f"deadbeef0000010{i}"))
                assert [d["outcome"] for d in quick.json()["decisions"]] == ["skipped_cooldown"], quick.text
            proxy.close()
            down = post(inst.url, notification("deadbeef00000201"))
            assert down.status_code == 503 and int(down.headers["Retry-After"]) > 0, down.text
            proxy.open()
            wait_http(f"{inst.url}/readyz", 15)
            for i in range(4):  # every worker, whichever gets it: no broken connection is handed out again
                after = post(inst.url, notification(f"deadbeef0000030{i}"))
                assert after.status_code == 200, after.text
                assert [d["outcome"] for d in after.json()["decisions"]] == ["skipped_cooldown"], after.text
            assert SECRET not in ready.text + answer.text + retry.text + down.text
        log = inst.read_log()
        assert "store unavailable" in log
        assert SECRET not in log


def test_different_notifications_at_once_still_scale_once(replicas: list[Service]) -> None:
    """No dedup here: the per-pool lease and the cooldown alone keep two replicas from both acting."""
    bases = [r.url for r in replicas]
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda i: post(bases[i % 2], notification(f"{i:016x}")), range(64)))
    outcomes = Counter(d["outcome"] for a in answers for d in a.json()["decisions"])
    for a in answers:  # a pool held by the other decision past lock_wait is a 503 (a retry can act)
        assert a.status_code == (503 if a.json()["decisions"][0]["outcome"] == "skipped_busy" else 200), a.text
    assert outcomes["scaled"] == 1, outcomes
    assert set(outcomes) <= {"scaled", "skipped_cooldown", "skipped_busy"}, outcomes
    assert sum(outcomes.values()) == 64
