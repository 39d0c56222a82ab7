"""A night an operator opens the status page on: five hours of a fallback group (its spot pool stocked out and
short), a 2 -> 3 -> 2 step, a demand-mode pool sized by its alerts' values, a pause with HTML in its reason.

Written in-process with a clock that ends at ``end`` (the real time, when gunicorn then serves the same database),
so the page shows hours of history; every event is made by the service's own code paths.
"""
from __future__ import annotations

import copy
from typing import Any

from flask import Flask

from tests.support import AUTH, FakeClock, am_alert, am_payload, config, make_app, post

HOUR = 3600.0
POOLS: list[dict[str, Any]] = [
    {"name": "a100-spot", "provider": "simulated", "min": 0, "max": 6, "gpus_per_node": 8,
     "capacity": {"short_for": "8h"}, "simulated": {"initial_count": 0, "capacity": 2}},
    {"name": "a100-ondemand", "provider": "simulated", "min": 0, "max": 6, "gpus_per_node": 8,
     "simulated": {"initial_count": 0}},
    {"name": "train", "provider": "simulated", "min": 1, "max": 40, "gpus_per_node": 8, "provision_time": "8m",
     "scale_out": {"mode": "demand", "cooldown": "1m"}, "simulated": {"initial_count": 1}},
]
GROUPS = [{"name": "a100", "pools": ["a100-spot", "a100-ondemand"]}]
PAUSE_REASON = "<script>alert('x')</script> driver upgrade"


def scenario_config(db_url: str, pools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return config(db_url, pools=copy.deepcopy(pools or POOLS), groups=GROUPS, rules=[])


def _alert(app: Flask, pool: str, action: str, fingerprint: str, step: int = 1, value: float | None = None) -> Any:
    labels = {"autoscaler_pool": pool, "autoscaler_action": action, "autoscaler_step": str(step)}
    alert = am_alert("GPUBusy" if action == "scale_out" else "GPUIdle", fingerprint=fingerprint, **labels)
    if value is not None:
        alert["annotations"]["value"] = str(value)
    return post(app.test_client(), "/webhook/alertmanager", am_payload(alert)).get_json()


def write_night(db_url: str, end: float, pools: list[dict[str, Any]] | None = None, clock: FakeClock | None = None,
                **changes: Any) -> Flask:
    """Five hours of decisions ending at ``end``; the app that made them (its clock, ``clock`` when given, stopped
    at ``end``)."""
    clock = clock or FakeClock()
    clock.now = end - 5 * HOUR
    app = make_app(db_url, clock, pools=copy.deepcopy(pools or POOLS), groups=GROUPS, rules=[], **changes)
    client = app.test_client()
    reconciler = app.extensions["autoscaler_reconciler"]
    _alert(app, "a100-spot", "scale_out", "s1", step=4)  # the spot cloud accepts 4, delivers 2
    clock.advance(30)
    reconciler.tick(clock())  # no_capacity: given back 4 -> 2, the group asks on-demand for the 2 missing
    for i, (gpus, wait) in enumerate([(16, 0.4), (24, 0.05), (0, 0.5), (8, 0.6)]):
        clock.advance(wait * HOUR)
        _alert(app, "train", "scale_out", f"d{i}", value=gpus)
    clock.advance(0.5 * HOUR)
    _alert(app, "a100", "scale_out", "g1")  # the group: spot is short, on-demand takes it (2 -> 3)
    clock.advance(60)
    _alert(app, "a100", "scale_out", "g2")  # inside the cooldown: no change
    clock.advance(25 * 60)
    _alert(app, "a100-ondemand", "scale_in", "g3")  # and back: 3 -> 2
    clock.advance(end - clock() - 240)
    _alert(app, "train", "scale_out", "d9", value=8)  # 4 min ago: one node in flight, scale-in held 6 min more
    clock.advance(60)
    client.post("/api/v1/pools/a100-spot/pause", json={"reason": PAUSE_REASON}, headers=AUTH)
    clock.advance(180)
    return app


#: A night with a cluster: the a100 group and ``train`` as above, ``h100`` (DRA GPUs, a node in repair whose
#: training Job keeps it within grace) and ``l4`` (no group, short of capacity).
H100_LABELS = {"pool": "h100"}
CLUSTER_POOLS: list[dict[str, Any]] = [
    *POOLS,
    {"name": "h100", "provider": "simulated", "min": 1, "max": 8, "gpus_per_node": 8, "node_selector": "pool=h100",
     "repair": {"max_unhealthy": 1, "grace": "1h"},
     "simulated": {"nodes": ["h100-0", "h100-1", "h100-2", "h100-3"]}},
    {"name": "l4", "provider": "simulated", "min": 0, "max": 6, "gpus_per_node": 4,
     "capacity": {"short_for": "30m"}, "simulated": {"initial_count": 0, "capacity": 1}},
]


def seed_cluster(kube: Any) -> None:
    """Four DRA nodes of ``h100``: a training Job on h100-0 (the node that will be repaired), inference on h100-1,
    and a pod waiting for two GPUs."""
    for i in range(4):
        kube.add_dra_node(f"h100-{i}", H100_LABELS, created=f"2026-11-0{i + 1}T00:00:00Z")
    kube.add_claim_pod("train-0", "h100-0", gpus=8)
    kube.add_claim_pod("serve-0", "h100-1", gpus=1, owner="ReplicaSet")
    kube.add_claim_pod("wait-0", "", gpus=2, labels={"gpu-autoscaler/pool": "h100"})


def cluster_config(db_url: str, kube: Any) -> dict[str, Any]:
    return config(db_url, pools=copy.deepcopy(CLUSTER_POOLS), groups=GROUPS, rules=[],
                  kubernetes={"host": kube.url, "token": kube.token})


def write_cluster_night(db_url: str, end: float, kube: Any) -> Flask:
    """:func:`write_night`'s five hours, then ``l4`` short (no group) 20 min ago and h100-0's repair (XID 79) 12 min
    ago, the reconciler listing the cluster as it goes; the app that made them (its clock stopped at ``end``)."""
    clock = FakeClock()
    app = write_night(db_url, end - 30 * 60, pools=CLUSTER_POOLS, clock=clock,
                      kubernetes={"host": kube.url, "token": kube.token})
    reconciler = app.extensions["autoscaler_reconciler"]
    reconciler.tick(clock())
    clock.advance(10 * 60)
    _alert(app, "l4", "scale_out", "l1", step=3)  # the cloud accepts 3, delivers 1: short, and no group to ask
    clock.advance(30)
    reconciler.tick(clock())
    clock.advance(8 * 60)
    alert = am_alert("GPUNodeUnhealthy", fingerprint="x79", autoscaler_pool="h100", autoscaler_action="repair",
                     node="h100-0", xid="79")
    post(app.test_client(), "/webhook/alertmanager", am_payload(alert))
    clock.advance(end - clock())
    reconciler.tick(clock())
    reconciler.stop()  # its lease given up: the served service's reconciler takes over at once
    return app


def chromium(browser: str, profile: Any, width: int, height: int) -> list[str]:
    """Debian's Chromium, headless, quiet, at a window of ``width`` x ``height`` CSS pixels."""
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
            f"--window-size={width},{height}"]
