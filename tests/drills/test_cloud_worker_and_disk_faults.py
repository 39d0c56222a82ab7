"""Fault drills: a slow or failing cloud, a worker killed mid-decision, a read-only disk. Nothing is lost."""
from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml
from sqlalchemy import create_engine, text

from tests.support.fakes.fault_cloud import FakeCloud, HttpTestProvider, Reply
from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, make_app


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    with FakeCloud(count=2) as fake:
        yield fake


def outcomes(client: Any, pool: str = "gpu") -> list[str]:
    events = client.get(f"/api/v1/events?pool={pool}", headers=AUTH).get_json()["events"]
    return [e["outcome"] for e in reversed(events)]


def send(client: Any, fp: str = "fp1") -> Any:
    return client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint=fp)), headers=AUTH)


def test_provider_timeout_then_recovers(tmp_path: Path, cloud: FakeCloud) -> None:
    clock = FakeClock()
    cloud.script = [Reply(delay=1.0, apply=False)]
    app = make_app(f"sqlite:///{tmp_path}/s.db", clock, {"gpu": HttpTestProvider(cloud.url, timeout=0.3)})
    client = app.test_client()
    first = send(client)
    assert first.status_code == 503 and int(first.headers["Retry-After"]) >= 60
    assert "did not answer" in first.get_json()["decisions"][0]["reason"]
    clock.advance(10)
    early = send(client)  # Alertmanager retries sooner than asked
    assert early.status_code == 503 and early.get_json()["decisions"][0]["outcome"] == "skipped_backoff"
    clock.advance(51)
    late = send(client)
    assert late.status_code == 200 and late.get_json()["decisions"][0]["to"] == 3
    assert outcomes(client) == ["failed", "skipped_backoff", "scaled"]  # one event per request
    assert [c["status"] for c in cloud.calls] == [200, 200] and cloud.count == 3
    pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert pool["failures"] == 0 and pool["backoff_remaining_s"] == 0 and pool["current"] == 3


def test_throttled_then_server_error_then_recovers(tmp_path: Path, cloud: FakeCloud) -> None:
    clock = FakeClock()
    cloud.script = [Reply(429, headers={"Retry-After": "90"}), Reply(503)]
    app = make_app(f"sqlite:///{tmp_path}/s.db", clock, {"gpu": HttpTestProvider(cloud.url)})
    client = app.test_client()
    answers = [send(client)]
    assert answers[0].status_code == 503 and answers[0].headers["Retry-After"] == "90"  # the cloud's ask wins
    clock.advance(91)
    answers.append(send(client))
    assert answers[1].status_code == 503 and answers[1].headers["Retry-After"] == "120"  # backoff doubles
    clock.advance(121)
    answers.append(send(client))
    assert answers[2].status_code == 200
    assert outcomes(client) == ["failed", "failed", "scaled"]
    assert [c["status"] for c in cloud.calls] == [429, 503, 200] and cloud.count == 3  # one change in the end
    reasons = [a.get_json()["decisions"][0]["reason"] for a in answers[:2]]
    assert "[429]" in reasons[0] and "[503]" in reasons[1]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_autoscaler_provider_errors_total{code="Throttled",provider="simulated"} 1.0' in metrics
    assert 'gpu_autoscaler_provider_errors_total{code="CloudUnavailable",provider="simulated"} 1.0' in metrics


def _gunicorn_config(tmp_path: Path) -> Path:
    cfg = config(f"sqlite:///{tmp_path}/state.db")
    cfg["server"]["lease_ttl"] = "4s"
    cfg["server"]["lock_wait"] = "200ms"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_worker_killed_mid_decision(tmp_path: Path, cloud: FakeCloud) -> None:
    cloud.script = [Reply(block=True)]  # the cloud takes the change, then hangs before answering
    env = {"AUTOSCALER_CONFIG": str(_gunicorn_config(tmp_path)), "FAULT_CLOUD_URL": cloud.url,
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")}
    with Service(None, tmp_path, workers=2, env=env, app="tests.support.fault_app:app", graceful_timeout=2) as server:
        hook = f"{server.url}/webhook/alertmanager"
        body = am_payload(am_alert(fingerprint="fp-kill"))
        lost: list[BaseException] = []

        def deliver() -> None:
            try:
                requests.post(hook, json=body, headers=AUTH, timeout=20)
            except requests.RequestException as exc:
                lost.append(exc)

        sender = threading.Thread(target=deliver)
        sender.start()
        victim = wait_for(lambda: cloud.calls and cloud.calls[0]["pid"], 15, "the cloud call")
        os.kill(victim, signal.SIGKILL)
        sender.join(10)
        assert lost, "the request to the killed worker should have failed"
        wait_for(lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(), 15, "a new worker")

        retry = requests.post(hook, json=body, headers=AUTH, timeout=10)  # Alertmanager sends it again
        assert retry.status_code == 200
        assert retry.json()["decisions"][0]["outcome"] == "skipped_duplicate"

        # A new alert meets the dead worker's lease: 503 + Retry-After (our lease, so Alertmanager must send it
        # again), until the lease lapses (lease_ttl 4s: it was renewed while the worker lived), then it acts.
        seen: list[str] = []
        statuses: list[tuple[int, str | None]] = []

        def new_alert_scaled() -> bool:
            answer = requests.post(hook, json=am_payload(am_alert(fingerprint="fp-new")), headers=AUTH, timeout=10)
            seen.append(answer.json()["decisions"][0]["outcome"])
            statuses.append((answer.status_code, answer.headers.get("Retry-After")))
            return seen[-1] == "scaled"

        wait_for(new_alert_scaled, 10, "the new alert to scale")
        assert set(seen[:-1]) <= {"skipped_busy"}
        assert seen[:-1], "the first retry came after the lease had already lapsed"
        assert all(code == 503 and after and int(after) >= 1 for code, after in statuses[:-1]), statuses
        assert statuses[-1][0] == 200
        assert [c["target"] for c in cloud.calls] == [3, 4]  # no second action for the killed delivery
        events = requests.get(f"{server.url}/api/v1/events?pool=gpu", headers=AUTH, timeout=5).json()["events"]
        assert len(events) == 1 + len(seen)  # every answered request is one event; the killed one has none
        pool = requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=5).json()
        assert pool["current"] == 4 and pool["busy"] is False
        cloud.release.set()
    with create_engine(f"sqlite:///{tmp_path}/state.db").connect() as conn:
        assert conn.execute(text("SELECT lease_owner FROM pools WHERE name='gpu'")).scalar() is None


def _mount(*args: str) -> bool:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode:
        print("mount", *args, "->", result.stderr.strip())
    return result.returncode == 0


def _remount_read_only(disk: Path) -> bool:
    """Remount read-only once no file on it is open or mapped (a connection in a reference cycle may still be)."""
    def unmapped() -> bool:
        gc.collect()
        return not any(str(disk) in line for line in Path("/proc/self/maps").read_text().splitlines())

    try:
        wait_for(unmapped, 2.0, f"no file of {disk} mapped")
    except TimeoutError:
        return False
    return _mount("-o", "remount,ro", str(disk))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)):
        pytest.skip("needs root and mount to make a read-only disk")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_read_only_disk_answers_503_and_writes_nothing(small_disk: Path) -> None:
    clock = FakeClock()
    app = make_app(f"sqlite:///{small_disk}/state.db", clock)
    client = app.test_client()
    assert send(client, "fp-before").status_code == 200
    app.extensions["autoscaler"].store.engine.dispose()  # close the pooled files so the disk can go read-only
    assert _remount_read_only(small_disk)
    clock.advance(400)
    for resp in (send(client, "fp-ro"), client.post("/api/v1/pools/gpu/scale", json={"action": "scale_out"},
                                                    headers=AUTH),
                 client.post("/api/v1/pools/gpu/pause", json={"reason": "x"}, headers=AUTH)):
        assert resp.status_code == 503 and resp.headers["Retry-After"]
        assert "store unavailable" in resp.get_json()["error"]
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.get_json()["status"] == "unavailable"
    assert client.get("/healthz").status_code == 200
    assert "gpu_autoscaler_store_up 0.0" in client.get("/metrics").get_data(as_text=True)

    assert _mount("-o", "remount,rw", str(small_disk))
    # the kernel is asked whether the file is writable at most every probe_interval (2 s, real time): ready again
    # within it (a loaded machine took longer than the remount alone, and the cached "read-only" answered)
    wait_for(lambda: client.get("/readyz").status_code == 200, 5.0, "/readyz ready once the disk is writable")
    pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert pool["current"] == 3 and pool["paused"] is False  # the refused writes left nothing behind
    assert outcomes(client) == ["scaled"]
    retry = send(client, "fp-ro")  # the sender's retry acts: its dedup key was never written
    assert retry.status_code == 200 and retry.get_json()["decisions"][0]["outcome"] == "scaled"
    assert json.dumps(outcomes(client)) == '["scaled", "scaled"]'


def _hook_answers(server: Service, fps: list[str]) -> list[requests.Response]:
    return [requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert(fingerprint=fp)),
                          headers=AUTH, timeout=10) for fp in fps]


def _store_up(server: Service) -> str:
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    return [line.split()[-1] for line in text.splitlines() if line.startswith("gpu_autoscaler_store_up")][0]


@pytest.mark.slow
def test_store_file_deleted_under_gunicorn(tmp_path: Path) -> None:
    db = tmp_path / "data" / "state.db"
    cfg = config(f"sqlite:///{db}")
    with Service(cfg, tmp_path, workers=2, graceful_timeout=2) as server:
        assert [r.json()["decisions"][0]["outcome"] for r in _hook_answers(server, ["fp-1"])] == ["scaled"]
        db.unlink()
        answers = _hook_answers(server, [f"fp-gone-{i}" for i in range(6)])  # both workers, several threads
        assert all(r.status_code == 503 and r.headers["Retry-After"] for r in answers), [r.text for r in answers]
        assert all(requests.get(f"{server.url}/readyz", timeout=10).status_code == 503 for _ in range(4))
        assert {_store_up(server) for _ in range(4)} == {"0.0"}
        assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert not db.exists()  # no fresh, empty database took its place
        assert "database file was removed" in server.read_log()

        victim = sorted(server.worker_pids())[0]  # a worker restarted now (a crash, a timeout) must not create one
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(), 15, "a new worker")
        wait_for(lambda: server.read_log().count("worker config:") >= 3, 15, "the restarted worker to start")
        answers = _hook_answers(server, [f"fp-after-{i}" for i in range(6)])
        assert all(r.status_code == 503 for r in answers), [r.text for r in answers]
        assert all(requests.get(f"{server.url}/readyz", timeout=10).status_code == 503 for _ in range(4))
        assert server.proc is not None and server.proc.poll() is None  # the service keeps serving (503s)
        assert not db.exists()


# root ignores file modes: run gunicorn without the capabilities that let it, as a service user would be
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
          "--inh-caps", "-dac_override,-dac_read_search", "--"]


@pytest.mark.slow
def test_store_file_read_only_and_back_under_gunicorn(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop the capabilities that let root ignore file modes")
    db = tmp_path / "state.db"
    cfg = config(f"sqlite:///{db}")
    cfg["defaults"] = {**cfg["defaults"], "scale_out": {"step": 1, "cooldown": 0}}
    cfg["pools"][0]["max"] = 20
    with Service(cfg, tmp_path, workers=2, graceful_timeout=2, wrapper=NO_DAC) as server:
        assert _hook_answers(server, ["fp-1"])[0].status_code == 200
        os.chmod(db, 0o444)
        # A fixed wait on purpose: each worker's probe looks at most every 2 s, and which worker answers a poll is
        # gunicorn's choice, so no answer tells that both have looked; after 2.5 s both have.
        time.sleep(2.5)
        answers = _hook_answers(server, [f"fp-ro-{i}" for i in range(6)])
        assert all(r.status_code == 503 and r.headers["Retry-After"] for r in answers), [r.text for r in answers]
        assert all(requests.get(f"{server.url}/readyz", timeout=10).status_code == 503 for _ in range(4))
        assert {_store_up(server) for _ in range(4)} == {"0.0"}

        os.chmod(db, 0o644)
        time.sleep(2.5)  # likewise
        assert all(requests.get(f"{server.url}/readyz", timeout=10).status_code == 200 for _ in range(4))
        answers = _hook_answers(server, [f"fp-ro-{i}" for i in range(6)])  # the senders' retries act
        assert [r.status_code for r in answers] == [200] * 6, [r.text for r in answers]
        assert {r.json()["decisions"][0]["outcome"] for r in answers} == {"scaled"}
        pool = requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=10).json()
        assert pool["current"] == 3 + 6  # nothing of the refused ones had been written
