"""The capacity story end to end through gunicorn: an alert scales the preferred pool of a group, the (simulated)
cloud accepts and cannot create the machines, the service records no_capacity, gives the undelivered size back and
scales the next pool; capacity returns and the preferred pool is asked again; a scale-in takes the fallback pool's
nodes first. The events tell it in order."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import am_alert, am_payload

pytestmark = pytest.mark.slow
TOKEN = "capacity-e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WINDOW = 8.0  # seconds of stockout from the start


def _at(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def config(tmp_path: Path, start: float) -> dict[str, Any]:
    stockout = [{"start": _at(start - 60), "end": _at(start + WINDOW), "nodes": 1}]
    quick = {"cooldown": 0, "step": 1}
    return {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "reconcile_interval": "1s"},
        "store": {"url": f"sqlite:///{tmp_path}/capacity.db"},
        "defaults": {"scale_out": quick, "scale_in": {**quick, "delay_after_scale_out": 0}, "dedup_window": "1m"},
        "pools": [{"name": "a100-spot", "provider": "simulated", "min": 1, "max": 6, "capacity": {"short_for": "5s"},
                   "simulated": {"initial_count": 1, "capacity": stockout}},
                  {"name": "a100-ondemand", "provider": "simulated", "min": 0, "max": 6}],
        "groups": [{"name": "a100", "pools": ["a100-spot", "a100-ondemand"]}],
    }


def _alert(base: str, action: str, step: int, fingerprint: str) -> dict[str, Any]:
    alert = am_alert("GPUBusy" if action == "scale_out" else "GPUIdle", fingerprint=fingerprint,
                     autoscaler_pool="a100", autoscaler_action=action, autoscaler_step=str(step))
    answer = requests.post(f"{base}/webhook/alertmanager", json=am_payload(alert), headers=AUTH, timeout=10)
    assert answer.status_code == 200, answer.text
    [decision] = answer.json()["decisions"]
    return decision  # type: ignore[no-any-return]


def _story(base: str) -> list[tuple[str, str, str, int, int]]:
    events = requests.get(f"{base}/api/v1/events", headers=AUTH, timeout=10).json()["events"]
    return [(e["pool"], e["source"], e["outcome"], e["from"], e["to"]) for e in reversed(events)]


def test_a_stockout_falls_back_and_comes_back(tmp_path: Path) -> None:
    start = time.time()
    with Service(config(tmp_path, start), tmp_path, workers=1) as server:
        first = _alert(server.url, "scale_out", 2, "fp-1")
        assert (first["pool"], first["outcome"], first["from"], first["to"]) == ("a100-spot", "scaled", 1, 3)
        wait_for(lambda: len(_story(server.url)) >= 3, 20, "no_capacity and the fallback", interval=0.2)
        assert _story(server.url) == [("a100-spot", "alertmanager", "scaled", 1, 3),
                                      ("a100-spot", "reconcile", "no_capacity", 3, 1),
                                      ("a100-ondemand", "reconcile", "scaled", 0, 2)]
        spot = requests.get(f"{server.url}/api/v1/pools/a100-spot", headers=AUTH, timeout=10).json()
        assert spot["current"] == 1 and spot["short_until"] is not None and "SimulatedStockout" in spot["short_reason"]
        groups = requests.get(f"{server.url}/api/v1/groups", headers=AUTH, timeout=10).json()["groups"]
        assert [p["name"] for p in groups[0]["pools"]] == ["a100-spot", "a100-ondemand"]
        wait_for(lambda: time.time() > start + WINDOW + 1 and requests.get(
            f"{server.url}/api/v1/pools/a100-spot", headers=AUTH, timeout=10).json()["short_until"] is None,
            30, "the stockout and the short mark to end", interval=0.2)
        again = _alert(server.url, "scale_out", 1, "fp-2")  # capacity is back: the preferred pool again
        assert (again["pool"], again["outcome"], again["from"], again["to"]) == ("a100-spot", "scaled", 1, 2)
        idle = _alert(server.url, "scale_in", 1, "fp-3")  # the fallback pool gives its nodes back first
        assert (idle["pool"], idle["outcome"], idle["from"], idle["to"]) == ("a100-ondemand", "scaled", 2, 1)
        after = time.time()  # two more reconciler ticks: the delivered scale-out has nothing to record
        wait_for(lambda: (requests.get(f"{server.url}/api/v1/pools/a100-spot", headers=AUTH, timeout=10)
                          .json()["view_read_at"] or 0) > after + 2, 20, "two more reconciler ticks", interval=0.2)
        assert [s[2] for s in _story(server.url)] == ["scaled", "no_capacity", "scaled", "scaled", "scaled"]
        metrics = requests.get(f"{server.url}/metrics", timeout=10).text
        assert 'gpu_autoscaler_no_capacity_total{code="SimulatedStockout",pool="a100-spot"} 1.0' in metrics
