"""The headroom kept from the cluster and a utilisation scale-in do not take turns: a need that dips below a node
boundary and comes back within the scale-in's stabilization window keeps the pool where it is.

Before, each dip let the scale-in remove a node (the floor of that moment allowed it) and the reconciler's top-up
added it again when the need came back: two direction changes a dip, all night long (issue 37, round 6).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from autoscaler.clock import ManualClock
from autoscaler.config.load import build_settings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.pool.events import EventLog
from autoscaler.reconcile.loop import Reconciler
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.space import GRID, Space, describe
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.store.memory import MemoryStore
from providers import build

ROOT = Path(__file__).resolve().parents[3]
T0 = parse_time("2025-01-06T00:00:00Z")
# six hours of a need that wanders across 2 nodes: 25 minutes at 1.75, 25 at 2.25
WANDER = tuple(([1.75] * 25 + [2.25] * 25) * 7 + [1.75] * 10)


def _run(window: str) -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "bench" / "replay" / "proportional.yaml").read_text())
    pool = raw["pools"][0]
    pool["node_selector"] = "pool=gpu"  # the cluster is read: the reconciler keeps the headroom between alerts
    pool["scale_out"] = {"mode": "step", "step": 1, "cooldown": "3m", "headroom": {"nodes": 1}}
    pool["scale_in"] = {"mode": "step", "step": 1, "cooldown": "5m", "stabilization_window": window}
    raw["replay"]["rules"][1].update({"below": 70, "for": "5m"})
    return figures(simulate(build_settings(raw, env={}, replay=True), Trace(T0, WANDER)))


def test_a_need_wandering_across_a_node_boundary_does_not_flap_within_the_window() -> None:
    short, held = _run("1m"), _run("30m")
    # with a one-minute window each dip below 2 nodes is a scale-in and each return a top-up
    assert short["direction_changes"] >= 10, short
    # with 30 minutes the dips (25 minutes each) are inside it: the pool stays at need + 1 and never scales in
    assert held["direction_changes"] <= 1, held
    assert held["saturated_minutes"] <= short["saturated_minutes"]
    assert held["node_hours"] >= short["node_hours"]  # what the calm costs: the node the dips no longer give back


def test_the_tuner_searches_the_window_of_a_step_scale_in_only_where_the_cluster_is_read() -> None:
    raw = yaml.safe_load((ROOT / "bench" / "replay" / "proportional.yaml").read_text())
    raw["pools"][0]["scale_in"] = {"mode": "step", "step": 1, "cooldown": "5m"}
    plain = build_settings(raw, env={}, replay=True)
    raw["pools"][0]["node_selector"] = "pool=gpu"
    read = build_settings(raw, env={}, replay=True)
    assert "scale_in.stabilization_window" not in describe(plain, "gpu")
    assert describe(read, "gpu")["scale_in.stabilization_window"] == 300  # the default, as the base has it
    rng = random.Random(3)
    steps = [c for c in (Space(read, "gpu").sample(rng) for _ in range(60)) if c["scale_in.mode"] == "step"]
    assert steps and all(c["scale_in.stabilization_window"] in GRID["scale_in"]["stabilization_window"]
                         for c in steps)
    assert not any("scale_in.stabilization_window" in c for c in (Space(plain, "gpu").sample(rng) for _ in range(60))
                   if c["scale_in.mode"] == "step")


def test_the_replays_counted_check_finds_the_floor_the_listing_finds() -> None:
    """The replay's headroom check counts the requested GPUs itself instead of listing the pods: at every moment of
    a wandering day, with nodes booting, cordoned and full, both give the same floor (or both none)."""
    settings = build_settings(yaml.safe_load((ROOT / "bench" / "replay" / "proportional_cluster.yaml").read_text()),
                              env={}, replay=True)
    spec = settings.pools["gpu"]
    store = MemoryStore()
    store.ensure_pools(["gpu"])
    providers = {name: build(s.provider, name, s.provider_settings) for name, s in settings.pools.items()}
    names = [f"gpu-node-{i}" for i in range(6)]
    cluster = ReplayCluster(names, 8, 300.0, T0)
    clock = ManualClock(T0)
    parts = Parts.build(settings, store, providers, EventLog(store, clock=clock), clock, cluster=cluster)
    reconciler = Reconciler(parts, Engine(parts))
    found = 0
    for minute, demand in enumerate(WANDER[:120]):
        now = T0 + 60 * minute
        if minute == 30:
            cluster.follow(names + ["gpu-node-6"], now)  # one booting: not Ready, so no requested GPUs on it
        if minute == 40:
            cluster.cordon("gpu-node-0", "test", now)  # cordoned: its pods do not count
        cluster.set_demand(demand * 2.5, now)
        listed = reconciler.headroom_short(spec, cluster.requested, now)
        counted = reconciler.headroom_short(spec, cluster.requested, now, used=cluster.usage(now)[2] / 8)
        assert (listed and listed.nodes) == (counted and counted.nodes), (minute, listed, counted)
        found += listed is not None
    assert found  # some moments were short of the headroom, so the floors were compared, not only None
