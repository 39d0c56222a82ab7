"""Several clusters from one service: the Kubernetes API calls and the time of one reconciler tick with 1, 5 and 20
clusters of 50 nodes each, and the same with one cluster's API hanging.

    python -m bench.fleet [--clusters 1 5 20] [--nodes 50] [--hang]

The real app in-process, the real ``kubernetes`` client against one tests/support/fakes/kube.py server per cluster (one
pool of ``nodes`` 8-GPU nodes in each, a pod on every other node), the simulated provider as the cloud. A first
tick warms the connections; the figures are of the second. ``--hang``: the last cluster's API hangs (its reads end
at its 2 s deadline), the others' must not wait for it. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from typing import Any

from autoscaler.app import create_app
from tests.support.fakes.kube import FakeKube
from tests.support import config


def _seed(kube: FakeKube, nodes: int) -> None:
    for i in range(nodes):
        kube.add_node(f"gpu-{i:03d}", {"pool": "gpu"}, created=f"2026-11-20T10:{i % 60:02d}:00Z")
        if i % 2:
            kube.add_pod(f"train-{i}", f"gpu-{i:03d}", gpus=8)


def run(clusters: int, nodes: int, hang: bool = False) -> dict[str, Any]:
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        kubes = [stack.enter_context(FakeKube()) for _ in range(clusters)]
        for kube in kubes:
            _seed(kube, nodes)
        pools = [{"name": f"gpu-c{i}", "provider": "simulated", "min": 0, "max": nodes + 10, "cluster": f"c{i}",
                  "node_selector": "pool=gpu", "scale_in": {"victims": "idle"},
                  "simulated": {"nodes": [f"gpu-{n:03d}" for n in range(nodes)]}} for i in range(clusters)]
        cfg = config(f"sqlite:///{tmp}/bench.db", pools=pools, rules=[],
                     clusters=[{"name": f"c{i}", "host": k.url, "token": k.token, "timeout": "2s"}
                               for i, k in enumerate(kubes)])
        app = create_app(cfg, startup_check=False)
        reconciler = app.extensions["autoscaler_reconciler"]
        reconciler.tick(time.time())  # connections made, views stored
        for kube in kubes:
            kube.calls.clear()
        if hang:
            kubes[-1].hung.set()
        started = time.perf_counter()
        tick = reconciler.tick(time.time())
        took = time.perf_counter() - started
        for kube in kubes:
            kube.hung.clear()
        calls = [sum(k.calls.values()) for k in kubes]
        return {"clusters": clusters, "nodes_per_cluster": nodes, "hang": hang, "tick_s": round(took, 3),
                "api_calls": sum(calls), "api_calls_per_cluster": max(calls) if calls else 0,
                "pools_decided": len(tick.views)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--hang", action="store_true", help="also run each with the last cluster hanging")
    args = parser.parse_args()
    out = [run(n, args.nodes) for n in args.clusters]
    if args.hang:
        out += [run(n, args.nodes, hang=True) for n in args.clusters if n > 1]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
