"""Node-aware scale-in at cluster size: API calls to Kubernetes per decision, and the time from a scale-in alert to
the removal request, with 50 nodes and 2,000 pods on the fake API server (tests/support/fakes/kube.py, stdlib HTTP on
127.0.0.1, the real kubernetes client), the real app in-process and the webhook provider as the cloud.

    python -m bench.scale_in_nodes [--nodes 50] [--pods 2000] [--runs 5] [--victims idle|movable]

``--victims movable``: every node's GPU work is one inference replica (a ReplicaSet's, 1 GPU) instead of a job, so
no node is idle and each decision drains one node (its replica and CPU pods evicted) before the removal.

Prints one JSON object. The fake answers in well under a millisecond, so the time is the service's own (client,
JSON, decision, store) plus loopback HTTP; a real API server adds its latency per call, 8 pod lists at a time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

from autoscaler.app import create_app
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, am_alert, am_payload, config


def seed(kube: FakeKube, nodes: int, pods: int, movable: bool = False) -> None:
    """``nodes`` GPU nodes; per node a DaemonSet pod, CPU pods, and on all but every tenth node a GPU job (with
    ``movable``: on every node one 1-GPU inference replica)."""
    per_node = pods // nodes
    for i in range(nodes):
        name = f"aks-gpunp-12345678-vmss{i:06d}"
        minute = i % 1440
        kube.add_node(name, {"agentpool": "gpunp"}, created=f"2026-11-01T{minute // 60:02d}:{minute % 60:02d}:00Z")
        kube.add_pod(f"dcgm-{i}", name, namespace="gpu-operator", owner="DaemonSet", gpus=1)
        busy = movable or i % 10 != 0
        if movable:
            kube.add_pod(f"infer-{i}", name, gpus=1, owner="ReplicaSet", cpu="100m")
        elif busy:
            kube.add_pod(f"train-{i}", name, gpus=8)
        for j in range(per_node - 1 - busy):
            kube.add_pod(f"svc-{i}-{j}", name, namespace="apps", owner="ReplicaSet", cpu="100m")


def run(nodes: int, pods: int, runs: int, victims: str = "idle") -> dict[str, Any]:
    runs = min(runs, nodes // 10)  # one idle node in ten: each run removes one
    receiver = WebhookReceiver()
    with FakeKube() as kube, tempfile.TemporaryDirectory() as tmp:
        seed(kube, nodes, pods, movable=victims == "movable")
        pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": nodes + 10,
                "node_selector": "agentpool=gpunp", "webhook": {"url": receiver.url, "initial_count": nodes},
                "scale_in": {"cooldown": 0, "delay_after_scale_out": 0, "stabilization_window": 0,
                             "victims": victims}}
        cfg = config(f"sqlite:///{tmp}/bench.db", pools=[pool], rules=[
            {"match": {"alertname": "GPUUtilizationLow"}, "pool": "gpu", "action": "scale_in"}],
            kubernetes={"host": kube.url, "token": kube.token})
        cfg["defaults"]["dedup_window"] = 0
        client = create_app(cfg, startup_check=False).test_client()
        to_request, decision, calls = [], [], []
        for r in range(runs):
            kube.calls.clear()
            seen = len(receiver.received)
            start = time.monotonic()
            resp = client.post("/webhook/alertmanager", json=am_payload(am_alert("GPUUtilizationLow",
                                                                                  fingerprint=f"b{r}")),
                               headers=AUTH)
            done = time.monotonic()
            assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled", resp.get_data()
            to_request.append(receiver.received[seen].at - start)
            decision.append(done - start)
            calls.append(dict(kube.calls))
    receiver.stop()
    return {"benchmark": "scale_in_nodes", "nodes": nodes, "pods": pods, "runs": runs, "victims": victims,
            "kube_calls_per_decision": calls[-1], "kube_calls_total_per_decision": sum(calls[-1].values()),
            "alert_to_removal_request_s": {"median": round(statistics.median(to_request), 4),
                                           "max": round(max(to_request), 4)},
            "decision_s": {"median": round(statistics.median(decision), 4), "max": round(max(decision), 4)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5, help="at most nodes/10 (the idle nodes)")
    parser.add_argument("--victims", choices=["idle", "movable"], default="idle")
    args = parser.parse_args()
    print(json.dumps(run(args.nodes, args.pods, args.runs, args.victims), indent=2))


if __name__ == "__main__":
    main()
