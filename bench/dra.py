"""GPUs through DRA: the issue's scenario, the Kubernetes API calls a reconcile tick adds, the stored view's memory.

    python -m bench.dra scenario            # 4 H100 DRA nodes: train (8 GPUs by claim), serve (1), 2 idle;
                                            # a manual scale-in of 3 (victims: idle, min 0): what goes, what stays
    python -m bench.dra calls [--nodes 50]  # one reconciler tick over two pools: calls per resource, DRA and not
    python -m bench.dra memory [--nodes 500] [--claims 5000]
    --dra-status 403                        # scenario, calls: the fake refuses resource.k8s.io (RBAC without it)

The real app in-process, the real ``kubernetes`` client against tests/support/fakes/kube.py, the webhook provider as the
cloud. ``scenario`` runs on a checkout without DRA support too (it reads only the decision and the webhook call).
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
import tracemalloc
from typing import Any

from autoscaler.app import create_app
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, config


def _seed(kube: FakeKube, pools: int, nodes: int, claims: int, dra: bool = True) -> None:
    """``nodes`` 8-GPU nodes split over ``pools`` pools; ``claims`` one-GPU claims (pods) spread over them."""
    for i in range(nodes):
        name, labels = f"gpu-{i:04d}", {"agentpool": f"p{i % pools}"}
        kube.add_dra_node(name, labels) if dra else kube.add_node(name, labels)
    for c in range(claims):
        node = f"gpu-{c % nodes:04d}"
        gpu = (c // nodes) % 8
        if dra:
            kube.add_claim_pod(f"w-{c}", node, gpus=1, devices=[f"gpu-{gpu}"], owner="ReplicaSet")
        else:
            kube.add_pod(f"w-{c}", node, gpus=1, owner="ReplicaSet")


def _app(kube: FakeKube, tmp: str, pools: list[dict[str, Any]]) -> Any:
    cfg = config(f"sqlite:///{tmp}/bench.db", pools=pools, rules=[],
                 kubernetes={"host": kube.url, "token": kube.token})
    cfg["defaults"]["dedup_window"] = 0
    return create_app(cfg, startup_check=False)


def scenario(status: int = 200) -> dict[str, Any]:
    receiver = WebhookReceiver()
    with FakeKube() as kube, tempfile.TemporaryDirectory() as tmp:
        kube.dra.status = status
        for i in range(4):
            kube.add_dra_node(f"h100-{i}", {"agentpool": "h100"}, created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_claim_pod("train-0", "h100-0", gpus=8)
        kube.add_claim_pod("serve-0", "h100-1", gpus=1, owner="ReplicaSet")
        pool = {"name": "h100", "provider": "webhook", "min": 0, "max": 8, "node_selector": "agentpool=h100",
                "webhook": {"url": receiver.url, "initial_count": 4},
                "scale_in": {"cooldown": 0, "delay_after_scale_out": 0, "victims": "idle"}}
        client = _app(kube, tmp, [pool]).test_client()
        kube.calls.clear()
        answer = client.post("/api/v1/pools/h100/scale", headers=AUTH,
                             json={"action": "scale_in", "step": 3}).get_json()
        event = client.get("/api/v1/events", headers=AUTH).get_json()["events"][0]
        decision_calls = dict(sorted(kube.calls.items()))
    receiver.stop()
    return {"benchmark": "dra_scenario", "outcome": answer["outcome"], "from": answer["from"], "to": answer["to"],
            "removed": (event.get("details") or {}).get("nodes"), "kept": (event.get("details") or {}).get("kept"),
            "webhook_bodies": [r.body for r in receiver.received], "kube_calls_of_the_decision": decision_calls}


def joined(status: int = 200) -> dict[str, Any]:
    """Two DRA nodes; a scale-out to 3; the third node joins and publishes its 8 GPUs at once: in flight and
    shortfalls one tick later and past provision_time (5 minutes), on an injected clock."""
    from datetime import datetime, timezone

    from autoscaler.config.load import build_settings
    from tests.support import FakeClock

    clock = FakeClock()
    with FakeKube() as kube, tempfile.TemporaryDirectory() as tmp:
        kube.dra.status = status
        for i in range(2):
            kube.add_dra_node(f"h100-{i}", {"agentpool": "h100"}, created="2026-11-10T00:00:00Z")
        pool = {"name": "h100", "provider": "simulated", "min": 0, "max": 8, "node_selector": "agentpool=h100",
                "provision_time": "5m", "simulated": {"initial_count": 2}}
        cfg = config(f"sqlite:///{tmp}/bench.db", pools=[pool], rules=[],
                     kubernetes={"host": kube.url, "token": kube.token})
        app = create_app(build_settings(cfg, env={}), clock=clock, startup_check=False)
        client = app.test_client()
        client.post("/api/v1/pools/h100/scale", headers=AUTH, json={"target": 3, "force": True})
        created = datetime.fromtimestamp(clock(), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        kube.add_dra_node("h100-2", {"agentpool": "h100"}, created=created)  # joined, its GPUs published
        if status != 200:  # its GPUs cannot be seen: a training pod holding a claim runs on it
            kube.add_claim_pod("train-2", "h100-2", gpus=8)
        reconciler = app.extensions["autoscaler_reconciler"]
        clock.advance(30)
        reconciler.tick(clock())
        soon = client.get("/api/v1/pools/h100", headers=AUTH).get_json()["in_flight"]
        clock.advance(300)
        reconciler.tick(clock())
        late = client.get("/api/v1/events?pool=h100", headers=AUTH).get_json()["events"]
    return {"in_flight_30s_after": soon, "no_capacity_past_provision_time": [
        {k: e["details"].get(k) for k in ("code", "asked", "delivered")} for e in late
        if e["outcome"] == "no_capacity"]}


def calls(nodes: int, claims: int, status: int = 200) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "dra_calls", "nodes": nodes, "claims": claims, "pools": 2,
                           "dra_status": status}
    for dra in (False, True):
        with FakeKube() as kube, tempfile.TemporaryDirectory() as tmp:
            kube.dra.status = status
            _seed(kube, 2, nodes, claims, dra)
            pools = [{"name": f"p{p}", "provider": "simulated", "min": 0, "max": nodes,
                      "node_selector": f"agentpool=p{p}", "simulated": {"initial_count": nodes // 2}}
                     for p in range(2)]
            app = _app(kube, tmp, pools)
            reconciler = app.extensions["autoscaler_reconciler"]
            kube.calls.clear()
            start = time.monotonic()
            reconciler.tick(time.time())
            took = time.monotonic() - start
            out["dra" if dra else "device_plugin"] = {"calls": dict(sorted(kube.calls.items())),
                                                      "total": sum(kube.calls.values()), "tick_s": round(took, 3)}
    out["added_per_tick"] = out["dra"]["total"] - out["device_plugin"]["total"]
    return out


def memory(nodes: int, claims: int) -> dict[str, Any]:
    """The DRA facts (one read) and the pool's node views built from them, measured with tracemalloc."""
    from autoscaler.answers import dump, node_body
    from autoscaler.cluster.dra import dra_state
    from autoscaler.cluster.nodes import node_view

    with FakeKube() as kube:
        _seed(kube, 1, nodes, claims, True)
        raw = (list(kube.dra.classes.values()), list(kube.dra.slices.values()), list(kube.dra.claims.values()))
        by_node: dict[str, list[dict[str, Any]]] = {n: [] for n in kube.nodes}
        for pod in kube.pods.values():
            by_node[pod["spec"]["nodeName"]].append(pod)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        state = dra_state(*raw, ["gpu.nvidia.com", "mig.nvidia.com"])
        dra_bytes = tracemalloc.get_traced_memory()[0] - base
        views = [node_view(n, by_node[name], dra=state) for name, n in kube.nodes.items()]
        views_bytes = tracemalloc.get_traced_memory()[0] - base - dra_bytes
        tracemalloc.stop()
        stored = json.dumps([dump(node_body(v)) for v in views])
    return {"benchmark": "dra_memory", "nodes": nodes, "claims": claims,
            "dra_facts_bytes": dra_bytes, "node_views_bytes": views_bytes,
            "stored_view_json_bytes": len(stored), "gpus_used": sum(v.gpus_used() for v in views)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["scenario", "calls", "memory"])
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--claims", type=int, default=None)
    parser.add_argument("--dra-status", type=int, default=200, help="what the fake answers resource.k8s.io lists")
    args = parser.parse_args()
    if args.what == "scenario":
        result = {**scenario(args.dra_status), "joined_node": joined(args.dra_status)}
    elif args.what == "calls":
        n = args.nodes or 50
        result = calls(n, args.claims if args.claims is not None else 10 * n, args.dra_status)
    else:
        result = memory(args.nodes or 500, args.claims if args.claims is not None else 5000)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
