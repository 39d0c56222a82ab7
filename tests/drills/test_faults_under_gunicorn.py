"""Fault drills of issue 24 through the real app under gunicorn: text PostgreSQL cannot hold after a cloud call
(item 1), a pause racing a decision in flight (item 2), a hung Kubernetes API under open status pages (item 4)."""
from __future__ import annotations

import copy
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml

from tests.support import pg
from tests.support.fakes.fault_cloud import FakeCloud, Reply
from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH, am_alert, am_payload, config

pytestmark = pytest.mark.slow
JSON = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    with FakeCloud(count=2) as fake:
        yield fake


def _service(tmp_path: Path, cfg: dict[str, Any], cloud: FakeCloud, workers: int = 2) -> Service:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {"AUTOSCALER_CONFIG": str(path), "FAULT_CLOUD_URL": cloud.url, "FAULT_TIMEOUT": "20"}
    return Service(None, tmp_path, workers=workers, env=env, app="tests.support.fault_app:app", graceful_timeout=2)


def _events(server: Service, pool: str = "gpu") -> list[dict[str, Any]]:
    got = requests.get(f"{server.url}/api/v1/events?pool={pool}&limit=1000", headers=AUTH, timeout=10)
    return list(reversed(got.json()["events"]))


def test_text_postgresql_cannot_hold_is_recorded_once_after_the_cloud_call(tmp_path: Path, cloud: FakeCloud) -> None:
    pg.require_postgres()
    with pg.temp_database() as name:
        with _service(tmp_path, config(pg.url_for(name)), cloud) as server:
            hook = f"{server.url}/webhook/alertmanager"
            body = am_payload(am_alert(name="GPU\u0000High", fingerprint="fp\u0000nul", autoscaler_pool="gpu",
                                       autoscaler_action="scale_out"))
            answers = [requests.post(hook, json=body, headers=AUTH, timeout=10) for _ in range(3)]  # AM retries
            assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
            assert [a.json()["decisions"][0]["outcome"] for a in answers] == ["scaled", "skipped_duplicate",
                                                                              "skipped_duplicate"]
            assert [c["target"] for c in cloud.calls] == [3]  # the cloud acted once, not once per delivery
            wide = requests.post(hook, json=am_payload(am_alert(fingerprint="w", autoscaler_pool="p" * 100,
                                                                autoscaler_action="scale_out")),
                                 headers=AUTH, timeout=10)
            assert wide.status_code == 200 and wide.json()["decisions"][0]["outcome"] == "unknown_pool"
            paused = requests.post(f"{server.url}/api/v1/pools/gpu/pause", json={"reason": "why\u0000"},
                                   headers=JSON, timeout=10)
            assert paused.status_code == 200 and paused.json()["paused"] is True
            assert [e["outcome"] for e in _events(server)] == ["scaled", "skipped_duplicate", "skipped_duplicate",
                                                               "paused"]


def _pause_race_config(tmp_path: Path) -> dict[str, Any]:
    cfg = config(f"sqlite:///{tmp_path}/state.db")
    cfg["server"] = {**cfg["server"], "lock_wait": "10s"}
    cfg["defaults"] = {**cfg["defaults"], "scale_out": {"step": 1, "cooldown": 0}}
    cfg["pools"] = copy.deepcopy(cfg["pools"])
    cfg["pools"][0]["max"] = 200
    return cfg


def test_pause_answers_only_after_the_decision_in_flight(tmp_path: Path, cloud: FakeCloud) -> None:
    cloud.script = [Reply(block=True)]
    with _service(tmp_path, _pause_race_config(tmp_path), cloud) as server:
        sender = threading.Thread(target=lambda: requests.post(
            f"{server.url}/webhook/alertmanager", json=am_payload(am_alert(fingerprint="slow")), headers=AUTH,
            timeout=30))
        sender.start()
        wait_for(lambda: cloud.calls, 15, "the cloud call")
        answered: list[requests.Response] = []
        pauser = threading.Thread(target=lambda: answered.append(requests.post(
            f"{server.url}/api/v1/pools/gpu/pause", json={"reason": "drill"}, headers=JSON, timeout=30)))
        pauser.start()
        pauser.join(1.0)
        assert not answered, "pause answered while a scale of the pool was still running"
        cloud.release.set()
        sender.join(15)
        pauser.join(15)
        assert answered[0].status_code == 200 and answered[0].json()["paused"] is True
        assert [e["outcome"] for e in _events(server)] == ["scaled", "paused"]

        # and with a fast cloud, round after round: nothing is scaled after the pause that answered
        for i in range(15):
            requests.post(f"{server.url}/api/v1/pools/gpu/resume", json={}, headers=JSON, timeout=10)
            cloud.script = [Reply(delay=0.05)]
            alert = threading.Thread(target=lambda: requests.post(
                f"{server.url}/webhook/alertmanager", json=am_payload(am_alert(fingerprint=f"r{i}")),
                headers=AUTH, timeout=30))
            alert.start()
            time.sleep(0.02 * (i % 4))  # a real peer: the alert reaches the gunicorn worker at varied moments
            pause = requests.post(f"{server.url}/api/v1/pools/gpu/pause", json={}, headers=JSON, timeout=30)
            assert pause.status_code == 200, pause.text
            alert.join(15)
            outcomes = [e["outcome"] for e in _events(server)]
            last_pause = max(k for k, o in enumerate(outcomes) if o == "paused")
            assert "scaled" not in outcomes[last_pause:], (i, outcomes[-4:])


class HungApiServer:
    """A TCP listener that never accepts: every request to it hangs, as to a stuck Kubernetes API server."""

    def __enter__(self) -> "HungApiServer":
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()


def test_hung_kubernetes_api_does_not_starve_pages_health_or_alerts(tmp_path: Path, cloud: FakeCloud) -> None:
    with HungApiServer() as hung:
        cfg = config(f"sqlite:///{tmp_path}/state.db")
        cfg["kubernetes"] = {"host": hung.url, "token": "t", "timeout": "5s"}
        cfg["pools"] = copy.deepcopy(cfg["pools"])
        cfg["pools"][0]["node_selector"] = "agentpool=gpunp"  # the pool whose nodes pages show
        cfg["rules"] = [*cfg["rules"], {"match": {"alertname": "SpareHigh"}, "pool": "spare", "action": "scale_out"}]
        with _service(tmp_path, cfg, cloud, workers=1) as server:
            stop = threading.Event()

            def page() -> None:  # an open status page, refreshed
                while not stop.is_set():
                    try:
                        requests.get(f"{server.url}/", headers=AUTH, timeout=30)
                        requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=30)
                    except requests.RequestException:
                        pass

            pages = [threading.Thread(target=page, daemon=True) for _ in range(20)]
            for t in pages:
                t.start()
            try:
                time.sleep(1.0)  # a real peer: the 20 page loaders reach the worker's threads first
                started = time.monotonic()
                assert requests.get(f"{server.url}/healthz", timeout=30).status_code == 200
                healthz = time.monotonic() - started
                started = time.monotonic()
                alert = requests.post(f"{server.url}/webhook/alertmanager",
                                      json=am_payload(am_alert(name="SpareHigh", fingerprint="spare")),
                                      headers=AUTH, timeout=30)
                took = time.monotonic() - started
                pool = requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=30).json()
            finally:
                stop.set()
            print(f"/healthz {healthz:.2f}s, alert {took:.2f}s with 20 pages open on a hung API server")
            assert healthz < 2.0 and took < 3.0
            assert alert.status_code == 200 and alert.json()["decisions"][0]["outcome"] == "scaled"
            assert "nodes" not in pool and pool["nodes_error"]  # not listed (yet): said, not waited for
