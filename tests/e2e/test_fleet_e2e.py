"""Several clusters from one service, end to end: the real service under gunicorn, the real Kubernetes client against
two fake API servers (one per cluster) whose nodes have the same names. A group across both clusters scales in only
idle nodes of each cluster, the cordons go to the pool's own cluster, and one cluster's API hanging leaves the other
cluster's decisions, /healthz and the webhooks answering within seconds, with its reachable gauge at 0."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.cloud_stack import service_config
from tests.support.fakes.kube import FakeKube
from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH

pytestmark = pytest.mark.slow
NAMES = ["gpu-0", "gpu-1", "gpu-2"]  # the same node names in both clusters
LABELS = {"pool": "gpu"}


def seed(kube: FakeKube, busy: str) -> None:
    """Three nodes, oldest first; ``busy`` runs an 8-GPU training pod."""
    for i, name in enumerate(NAMES):
        kube.add_node(name, LABELS, created=f"2026-11-{10 + i:02d}T00:00:00Z")
    kube.add_pod("train", busy, gpus=8)


def pool(name: str, cluster: str) -> dict[str, Any]:
    return {"name": name, "provider": "simulated", "min": 0, "max": 6, "cluster": cluster,
            "node_selector": "pool=gpu", "scale_in": {"victims": "idle"},
            "simulated": {"nodes": list(NAMES)}}


def config(tmp_path: Path, weu: FakeKube, eus: FakeKube) -> dict[str, Any]:
    cfg = service_config(tmp_path, [pool("gpu-weu", "weu"), pool("gpu-eus", "eus")], [],
                         clusters=[{"name": "weu", "host": weu.url, "token": weu.token, "timeout": "2s"},
                                   {"name": "eus", "host": eus.url, "token": eus.token, "timeout": "2s"}],
                         groups=[{"name": "fleet", "pools": ["gpu-weu", "gpu-eus"]}])
    cfg["server"]["reconcile_interval"] = "1s"
    return cfg


def scale_in(url: str, pool_name: str) -> dict[str, Any]:
    resp = requests.post(f"{url}/api/v1/pools/{pool_name}/scale", json={"action": "scale_in", "step": 1},
                         headers=AUTH, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def patched(kube: FakeKube) -> list[str]:
    return [path.rsplit("/", 1)[-1] for method, path in kube.log if method == "PATCH"]


def gauge(url: str, cluster: str) -> float | None:
    text = requests.get(f"{url}/metrics", timeout=5).text
    found = re.search(rf'^gpu_autoscaler_cluster_reachable{{cluster="{cluster}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def test_each_pool_scales_in_idle_nodes_of_its_own_cluster(tmp_path: Path) -> None:
    with FakeKube() as weu, FakeKube() as eus:
        seed(weu, busy="gpu-2")  # the newest node is busy in weu ...
        seed(eus, busy="gpu-1")  # ... the middle one in eus: the same names, other facts
        with Service(config(tmp_path, weu, eus), tmp_path, workers=1) as svc:
            first = scale_in(svc.url, "gpu-weu")
            second = scale_in(svc.url, "gpu-eus")
            events = requests.get(f"{svc.url}/api/v1/events", headers=AUTH, timeout=5).json()["events"]
            groups = requests.get(f"{svc.url}/api/v1/groups", headers=AUTH, timeout=5).json()["groups"]
            wait_for(lambda: gauge(svc.url, "eus") == 1 and gauge(svc.url, "weu") == 1, 20,
                     "both clusters listed by the reconciler")
            pool_eus = requests.get(f"{svc.url}/api/v1/pools/gpu-eus", headers=AUTH, timeout=5).json()
            cordoned = set(patched(weu)), set(patched(eus))
            drained = requests.post(f"{svc.url}/api/v1/pools/gpu-eus/scale", headers=AUTH, timeout=60,
                                    json={"action": "scale_in", "nodes": ["gpu-1"], "force": True}).json()
    assert first["outcome"] == "scaled" and second["outcome"] == "scaled", (first, second)
    # a forced removal drains in the pool's own cluster: eus's training pod evicted, weu's (on its gpu-2) untouched
    assert (drained["outcome"], drained["from"], drained["to"]) == ("scaled", 2, 1), drained
    assert ("ml", "train") not in eus.pods and ("ml", "train") in weu.pods
    details = {e["pool"]: e["details"] for e in events}
    # weu: gpu-2 busy, so the newest idle one (gpu-1) went; eus: gpu-1 busy, so gpu-2 went
    assert details["gpu-weu"]["nodes"] == ["gpu-1"] and details["gpu-weu"]["cluster"] == "weu"
    assert details["gpu-eus"]["nodes"] == ["gpu-2"] and details["gpu-eus"]["cluster"] == "eus"
    # each cordon went to the pool's own cluster, never to the other (where a node of the same name runs work)
    assert cordoned == ({"gpu-1"}, {"gpu-2"})
    assert set(patched(weu)) == {"gpu-1"} and set(patched(eus)) == {"gpu-1", "gpu-2"}  # the drain's, in eus only
    assert weu.pods[("ml", "train")]["spec"]["nodeName"] == "gpu-2"
    assert [(p["name"], p["cluster"]) for p in groups[0]["pools"]] == [("gpu-weu", "weu"), ("gpu-eus", "eus")]
    assert pool_eus["cluster"] == "eus" and pool_eus["cluster_reachable"] is True
    assert sorted(n["name"] for n in pool_eus["nodes"]) == NAMES


def test_a_hung_cluster_stalls_only_its_own_pools(tmp_path: Path) -> None:
    with FakeKube() as weu, FakeKube() as eus:
        seed(weu, busy="gpu-2")
        seed(eus, busy="gpu-1")
        with Service(config(tmp_path, weu, eus), tmp_path, workers=1) as svc:
            wait_for(lambda: gauge(svc.url, "eus") == 1, 20, "eus listed once")
            eus.hung.set()
            try:
                wait_for(lambda: gauge(svc.url, "eus") == 0, 30, "eus reported unreachable")
                started = time.monotonic()
                assert requests.get(f"{svc.url}/healthz", timeout=5).status_code == 200
                decided = scale_in(svc.url, "gpu-weu")  # the other cluster's decision, at once
                took = time.monotonic() - started
                assert gauge(svc.url, "weu") == 1
                listed_weu = len([p for m, p in weu.log if m == "GET" and p.endswith("/nodes")])
                wait_for(lambda: len([p for m, p in weu.log if m == "GET" and p.endswith("/nodes")])
                         > listed_weu + 2, 20, "the reconciler keeps listing weu while eus hangs")
                pool_eus = requests.get(f"{svc.url}/api/v1/pools/gpu-eus", headers=AUTH, timeout=5).json()
            finally:
                eus.hung.clear()
    assert decided["outcome"] == "scaled", decided
    assert took < 5, f"healthz and the other cluster's decision took {took:.1f}s"
    assert pool_eus["cluster"] == "eus" and pool_eus["cluster_reachable"] is False
    assert pool_eus["cluster_unreachable_since"] and "cluster eus" in pool_eus["nodes_error"]
    assert "unreachable" in pool_eus["nodes_error"]
    assert sorted(n["name"] for n in pool_eus["nodes"]) == NAMES  # the last good nodes kept
