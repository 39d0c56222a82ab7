"""The pure pick of ``victims: movable`` at pool size, with and without pod anti-affinity to simulate.

    python -m bench.movable_fit [--nodes 50 500] [--pods 10] [--runs 3]

Per node ``--pods`` pods: one 1-GPU inference replica (a ReplicaSet's) and CPU pods of other apps; the last node
runs a Job's GPU pod instead, so no node is idle. Three layouts: ``plain`` (no pod rules), ``anti`` (every replica
has required anti-affinity to its own label on kubernetes.io/hostname: only the Job's node takes a replica), and
``anti-full`` (the Job takes all 8 GPUs of its node, so nothing fits and the pick tries ``MAX_TRIED`` busy nodes,
its worst case). Prints one JSON object: the best of ``--runs`` wall times of ``pick_movable`` in ms, and the
node it drains.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

from autoscaler.cluster.movable import pick_movable
from autoscaler.cluster.nodes import NodeView, node_view

HOSTNAME = "kubernetes.io/hostname"
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "infer"}}, "topologyKey": HOSTNAME}]}}


def _pod(name: str, node: str, app: str, owner: str, resources: dict[str, Any], anti: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "main", "resources": resources}]}
    if anti:
        spec["affinity"] = ANTI
    return {"metadata": {"name": name, "namespace": "ml", "labels": {"app": app},
                         "ownerReferences": [{"kind": owner, "name": f"{app}-owner", "controller": True}]},
            "spec": spec, "status": {"phase": "Running"}}


def pool(nodes: int, pods: int, anti: bool, full: bool) -> list[NodeView]:
    views = []
    for i in range(nodes):
        name = f"gpu-{i:03d}"
        raw = {"metadata": {"name": name, "labels": {HOSTNAME: name},
                            "creationTimestamp": f"2026-11-{1 + i % 28:02d}T00:00:00Z"},
               "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                      "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "512Gi"}}}
        if i < nodes - 1:
            gpu = _pod(f"infer-{i}", name, "infer", "ReplicaSet", {"limits": {"nvidia.com/gpu": "1"}}, anti)
        else:
            gpu = _pod("train", name, "train", "Job", {"limits": {"nvidia.com/gpu": "8" if full else "1"}}, False)
        cpu = [_pod(f"svc-{i}-{k}", name, f"svc{k}", "ReplicaSet", {"requests": {"cpu": "100m"}}, False)
               for k in range(pods - 1)]
        views.append(node_view(raw, [gpu, *cpu], ("nvidia.com/gpu",)))
    return views


def measure(nodes: int, pods: int, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layout in ("plain", "anti", "anti-full"):
        views = pool(nodes, pods, anti=layout.startswith("anti"), full=layout.endswith("full"))
        best, drained = float("inf"), None
        for _ in range(runs):
            start = time.perf_counter()
            pick = pick_movable(views, 1, (), 1)
            best = min(best, time.perf_counter() - start)
            drained = pick.drain.name if pick.drain else None
        out[layout] = {"ms": round(best * 1000, 1), "drains": drained}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps({str(n): measure(n, args.pods, args.runs) for n in args.nodes}, indent=1))


if __name__ == "__main__":
    main()
