"""The real app under gunicorn with 2 workers: concurrent duplicates scale once, nothing is lost."""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import AUTH, BASE_CONFIG, am_alert, am_payload
from tests.support.servers import Service

pytestmark = pytest.mark.slow


def config(tmp_path: Path) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    return cfg


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-load", "preload"])
def test_50_concurrent_identical_alerts_scale_once(tmp_path: Path, preload: bool) -> None:
    """Also with ``gunicorn --preload``: the app (store engine, metrics) is built before the fork, and each worker
    must drop the inherited database connections and count its metrics in its own file."""
    body = am_payload(am_alert(fingerprint="storm"), am_alert(fingerprint="storm-2", gpu="1"))
    env = {"GUNICORN_CMD_ARGS": "--preload"} if preload else {}
    with Service(config(tmp_path), tmp_path, workers=2, env=env) as svc, requests.Session() as session:
        def send(_: int) -> tuple[int, str]:
            resp = session.post(f"{svc.url}/webhook/alertmanager", json=body, headers=AUTH, timeout=30)
            return resp.status_code, resp.json()["decisions"][0]["outcome"]

        with ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(send, range(50)))
        assert [status for status, _ in results] == [200] * 50
        outcomes = [outcome for _, outcome in results]
        assert outcomes.count("scaled") == 1, outcomes
        assert outcomes.count("skipped_duplicate") == 49
        events = requests.get(f"{svc.url}/api/v1/events?limit=1000", headers=AUTH, timeout=10).json()["events"]
        assert len(events) == 50
        assert sum(e["outcome"] == "scaled" for e in events) == 1
        gpu = requests.get(f"{svc.url}/api/v1/pools/gpu", headers=AUTH, timeout=10).json()
        assert gpu["current"] == 3
        metrics = requests.get(f"{svc.url}/metrics", timeout=10).text
        # counted across both workers (multiprocess mode)
        assert 'gpu_autoscaler_decisions_total{action="scale_out",outcome="skipped_duplicate",pool="gpu"} 49.0' \
            in metrics
        assert 'gpu_autoscaler_decisions_total{action="scale_out",outcome="scaled",pool="gpu"} 1.0' in metrics
    # the effective config is logged in full once, by the master (preload: the app it built; else its start-up hook);
    # without preload each worker builds its app and says in one line that its config is the one logged
    log = svc.read_log()
    assert log.count("effective config: sha256 ") == 1
    assert log.count("worker config: the effective config logged at start-up") == (0 if preload else 2)


def test_different_alerts_on_one_pool_are_serialised(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg["defaults"]["scale_out"]["cooldown"] = 0
    with Service(cfg, tmp_path, workers=2) as svc:
        def send(i: int) -> str:
            resp = requests.post(f"{svc.url}/webhook/alertmanager", json=am_payload(am_alert(fingerprint=f"f{i}")),
                                 headers=AUTH, timeout=30)
            assert resp.status_code == 200
            return str(resp.json()["decisions"][0]["outcome"])

        with ThreadPoolExecutor(max_workers=10) as pool:
            outcomes = list(pool.map(send, range(10)))
        # from 2 to max 6: four scale-outs, the rest find the pool at max; never more than max
        assert outcomes.count("scaled") == 4, outcomes
        assert outcomes.count("skipped_limit") == 6
        gpu = requests.get(f"{svc.url}/api/v1/pools/gpu", headers=AUTH, timeout=10).json()
        assert gpu["current"] == 6


def test_bad_input_under_gunicorn_is_4xx_and_json(tmp_path: Path) -> None:
    with Service(config(tmp_path), tmp_path, workers=1) as svc:
        resp = requests.post(f"{svc.url}/webhook/alertmanager", data=b"{oops", headers={**AUTH,
                             "Content-Type": "application/json"}, timeout=10)
        assert resp.status_code == 400 and resp.json()["error"]
        resp = requests.post(f"{svc.url}/webhook/alertmanager", data=b"x" * 2_000_000,
                             headers={**AUTH, "Content-Type": "application/json"}, timeout=10)
        assert resp.status_code == 413 and resp.json()["error"]
        assert "Traceback" not in svc.read_log()
