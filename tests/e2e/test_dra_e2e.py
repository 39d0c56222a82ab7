"""GPUs through DRA end to end: the real service under gunicorn, the real ``kubernetes`` client reading the fake API
server's ``resource.k8s.io/v1`` (NVIDIA's driver ``gpu.nvidia.com``), the fake ARM (AKS deleteMachines), the fake ACK
OpenAPI and the simulated provider. The issue's cluster (four H100 nodes on DRA: a training Job holding 8 GPUs
through a claim, serving on 1 claimed GPU, two idle) beside a pool on the device plugin in the same run."""
from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.cloud_stack import CLOUD_APP, AckCloud, AksCloud, service_config
from tests.support.fakes.kube import FakeKube
from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH, am_alert, am_payload

pytestmark = pytest.mark.slow

RULES = [{"match": {"alertname": "GPUUtilizationLow", "cloud": "ack"}, "pool": "gpu-ack", "action": "scale_in"}]


def _pool(svc: Service, name: str) -> dict[str, Any]:
    answer = requests.get(f"{svc.url}/api/v1/pools/{name}", headers=AUTH, timeout=10)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _gauges(svc: Service) -> dict[tuple[str, str], float]:
    text = requests.get(f"{svc.url}/metrics", headers=AUTH, timeout=10).text
    return {(m.group(1), m.group(2)): float(m.group(3)) for m in re.finditer(
        r'^gpu_autoscaler_pool_gpus\{pool="([^"]+)",state="([^"]+)"\} (\S+)$', text, re.M)}


def _now(offset: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + offset, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_idle_scale_in_keeps_the_claim_holding_nodes_beside_a_device_plugin_pool(tmp_path: Path) -> None:
    with AksCloud(count=4) as aks, AckCloud(count=2) as ack, FakeKube() as kube:
        h100 = aks.nodes()
        for i, node in enumerate(h100):  # oldest first: the training and the serving nodes are the oldest
            kube.add_dra_node(node.name, node.labels, provider_id=node.provider_id,
                              created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_claim_pod("train-0", h100[0].name, gpus=8)
        kube.add_claim_pod("serve-0", h100[1].name, gpus=1, owner="ReplicaSet")
        kube.add_claim_pod("train-1", "", gpus=8, labels={"gpu-autoscaler/pool": "h100"})  # waits for a node
        dp = ack.nodes()  # the device-plugin pool: nvidia.com/gpu allocatable, a pod requesting it
        for i, node in enumerate(dp):
            kube.add_node(node.name, node.labels, provider_id=node.provider_id,
                          created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_pod("train-dp", dp[1].name, gpus=8)
        cfg = service_config(tmp_path, [aks.pool_config("h100"), ack.pool_config("gpu-ack")], RULES,
                             kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["reconcile_interval"] = "1s"
        with Service(cfg, tmp_path, workers=2, env={**aks.env, **ack.env}, app=CLOUD_APP) as svc:
            wait_for(lambda: _pool(svc, "h100").get("gpus") is not None
                     and _pool(svc, "gpu-ack").get("gpus") is not None, 20, "the reconciler's first node view")
            before = _pool(svc, "h100")
            gauges = _gauges(svc)
            manual = requests.post(f"{svc.url}/api/v1/pools/h100/scale", headers=AUTH, timeout=30,
                                   json={"action": "scale_in", "step": 3, "reason": "the issue's scale-in"})
            assert manual.status_code == 200, manual.text
            alert = requests.post(f"{svc.url}/webhook/alertmanager", headers=AUTH, timeout=30,
                                  json=am_payload(am_alert("GPUUtilizationLow", fingerprint="dp", cloud="ack")))
            assert alert.status_code == 200, alert.text
            events = {e["pool"]: e for e in requests.get(f"{svc.url}/api/v1/events", headers=AUTH,
                                                         timeout=5).json()["events"]}
    # DRA pool: only the two idle nodes went; the claim-holding ones stay, their pods named
    decision = manual.json()
    assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 4, 2), decision
    assert aks.arm.machine_names("gpunp") == [h100[0].name, h100[1].name]
    assert [r.body for r in aks.arm.requests if r.path.endswith("/deleteMachines")] == [
        {"machineNames": [h100[3].name, h100[2].name]}]
    assert events["h100"]["details"]["kept"] == [
        {"node": h100[1].name, "reason": "runs GPU pod ml/serve-0 (gpu.nvidia.com 1)"},
        {"node": h100[0].name, "reason": "runs GPU pod ml/train-0 (gpu.nvidia.com 8)"}]
    # the device-plugin pool in the same run: its idle node went, its busy one stayed
    assert alert.json()["decisions"][0]["outcome"] == "scaled"
    assert [name for name, _ in ack.pool.nodes] == [dp[1].name]
    # the pool answer and the gauges from the stored view: what each pool has, holds and waits for
    assert before["dra"] == "read" and "dra_reason" not in before
    assert before["gpus"] == {"allocatable": 32, "requested": 9, "pending": 8}
    assert gauges[("h100", "allocatable")] == 32 and gauges[("h100", "requested")] == 9
    assert gauges[("h100", "pending")] == 8
    assert gauges[("gpu-ack", "allocatable")] == 16 and gauges[("gpu-ack", "requested")] == 8
    assert gauges[("gpu-ack", "pending")] == 0
    busy = {n["name"]: n for n in before["nodes"]}
    assert busy[h100[0].name]["gpu_pods"] == [{"namespace": "ml", "name": "train-0", "resource": "gpu.nvidia.com",
                                              "count": 8}] and not busy[h100[0].name]["removable"]


def test_a_joined_node_is_in_flight_until_its_slices_appear_and_one_without_is_short(tmp_path: Path) -> None:
    selector = {"agentpool": "h100"}
    with FakeKube() as kube:
        for i in range(2):
            kube.add_dra_node(f"h100-{i}", selector, created="2026-11-10T00:00:00Z")
        kube.add_claim_pod("train-0", "h100-0", gpus=8)
        pool = {"name": "h100", "provider": "simulated", "min": 0, "max": 8, "node_selector": "agentpool=h100",
                "provision_time": "12s", "gpus_per_node": 8, "scale_out": {"headroom": {"gpus": 4}},
                "simulated": {"initial_count": 2}}
        cfg = service_config(tmp_path, [pool], [], kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["reconcile_interval"] = "1s"
        with Service(cfg, tmp_path, workers=1) as svc:
            wait_for(lambda: _pool(svc, "h100").get("gpus") is not None, 20, "the first node view")
            assert _pool(svc, "h100")["current"] == 2  # 8 spare GPUs: above the headroom of 4
            # the serving claims take 5 of the spare devices: spare 3 < 4, the reconciler tops the pool up
            kube.add_claim_pod("serve-0", "h100-1", gpus=5, owner="ReplicaSet")
            wait_for(lambda: _pool(svc, "h100")["current"] == 3, 20, "the headroom top-up")
            topped, topped_at = _pool(svc, "h100")["last_event"], time.time()
            # the new machine registers as a node; the driver has not published its GPUs yet: in flight
            kube.add_dra_node("h100-2", selector, created=_now(), publish=False)
            wait_for(lambda: _pool(svc, "h100")["in_flight"] == 1 and any(
                n["name"] == "h100-2" for n in _pool(svc, "h100")["nodes"]), 20, "the joined node in flight")
            kube.dra.publish("h100-2")
            wait_for(lambda: _pool(svc, "h100")["in_flight"] == 0, 20, "in flight once its slices appear")
            landed = time.time()  # well within provision_time: the node, not the clock, ended its flight
            # past provision_time of the top-up (and two more ticks): the node with its GPUs is no shortfall
            wait_for(lambda: time.time() > topped_at + 12 + 2.5, 30, "provision_time past the top-up", interval=0.2)
            early = [e for e in requests.get(f"{svc.url}/api/v1/events?pool=h100", headers=AUTH,
                                             timeout=5).json()["events"] if e["outcome"] == "no_capacity"]
            # one more machine asked for by hand; its node joins and never publishes a slice
            manual = requests.post(f"{svc.url}/api/v1/pools/h100/scale", headers=AUTH, timeout=30,
                                   json={"target": 4, "force": True})
            assert manual.json()["outcome"] == "scaled", manual.text
            kube.add_dra_node("h100-3", selector, created=_now(), publish=False)
            short = wait_for(lambda: [e for e in requests.get(f"{svc.url}/api/v1/events?pool=h100", headers=AUTH,
                                                              timeout=5).json()["events"]
                                      if e["outcome"] == "no_capacity"], 40, "the shortfall of the silent node")
    assert topped["source"] == "reconcile" and "spare below the headroom" in topped["reason"]
    assert (topped["from"], topped["to"]) == (2, 3)
    assert landed < topped_at + 12, "in flight ended by provision_time, not by the GPUs appearing"
    assert early == [] and len(short) == 1
    details = short[0]["details"]
    assert (details["code"], details["asked"], details["delivered"]) == ("NodesNotReadyInTime", 4, 3)


def test_without_the_rbac_idle_scale_in_still_keeps_the_claim_holding_nodes(tmp_path: Path) -> None:
    """The ClusterRole lacks the resource.k8s.io rules (403). Before: every DRA node looked GPU-idle and the manual
    scale-in of 3 removed the serving node too (4 -> 1)."""
    with AksCloud(count=4) as aks, FakeKube() as kube:
        h100 = aks.nodes()
        for i, node in enumerate(h100):
            kube.add_dra_node(node.name, node.labels, provider_id=node.provider_id,
                              created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_claim_pod("train-0", h100[0].name, gpus=8)
        kube.add_claim_pod("serve-0", h100[1].name, gpus=1, owner="ReplicaSet")
        kube.dra.status = 403
        cfg = service_config(tmp_path, [aks.pool_config("h100")], [],
                             kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["reconcile_interval"] = "1s"
        with Service(cfg, tmp_path, workers=2, env=aks.env, app=CLOUD_APP) as svc:
            wait_for(lambda: _pool(svc, "h100").get("dra") == "not_read", 20, "the reconciler's first node view")
            before = _pool(svc, "h100")
            manual = requests.post(f"{svc.url}/api/v1/pools/h100/scale", headers=AUTH, timeout=30,
                                   json={"action": "scale_in", "step": 3, "reason": "RBAC without DRA"})
            assert manual.status_code == 200, manual.text
            events = requests.get(f"{svc.url}/api/v1/events?pool=h100", headers=AUTH, timeout=5).json()["events"]
    decision = manual.json()
    assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 4, 2), decision
    assert aks.arm.machine_names("gpunp") == [h100[0].name, h100[1].name]
    unread = "with resource claims (DRA not read (403): claim not counted, so it may hold GPUs)"
    assert events[0]["details"]["kept"] == [
        {"node": h100[1].name, "reason": f"runs pod ml/serve-0 {unread}"},
        {"node": h100[0].name, "reason": f"runs pod ml/train-0 {unread}"}]
    assert before["dra_reason"].startswith("403: the service account may not list deviceclasses")
    assert {n["name"]: n["removable"] for n in before["nodes"]} == {
        h100[0].name: False, h100[1].name: False, h100[2].name: True, h100[3].name: True}
