"""The replay and the live service share the decision code: the same alerts give the same decisions."""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any, Sequence

from autoscaler.app import create_app
from autoscaler.answers import decision_json
from autoscaler.config.load import build_settings
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.store import SqlStore
from providers.simulated import SimulatedProvider
from tests.support import FakeClock

T0 = parse_time("2025-01-06T00:00:00Z")
TOKEN = "parity-token"


def test_same_alert_sequence_same_decisions(tmp_path: Path) -> None:
    raw = {
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 12,
                   "scale_out": {"mode": "proportional", "target_utilization": 70, "max_step": 3, "cooldown": "3m"},
                   "scale_in": {"mode": "proportional", "target_utilization": 70, "max_step": 1, "cooldown": "5m",
                                "delay_after_scale_out": "5m", "stabilization_window": "5m"},
                   "simulated": {"initial_count": 2, "provision_seconds": 240}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "3m",
                   "rules": [{"alert": "GPUHigh", "above": 80, "for": "1m", "pool": "gpu", "action": "scale_out"},
                             {"alert": "GPULow", "below": 40, "for": "5m", "pool": "gpu", "action": "scale_in"}]},
    }
    settings = build_settings(raw, env={})
    demand = [1.0] * 10 + [3.0] * 20 + [7.5] * 40 + [2.0] * 60 + [0.5] * 60
    replayed = simulate(settings, Trace(T0, tuple(demand)))
    outcomes = {d.outcome.value for _, d in replayed.decisions}
    assert {"scaled", "ignored_resolved"} <= outcomes and len(replayed.notifications) >= 8

    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, store=SqlStore(f"sqlite:///{tmp_path}/live.db"),
                     startup_check=False)
    client = app.test_client()
    live = []
    for when, body in replayed.notifications:
        clock.now = when
        resp = client.post("/webhook/alertmanager", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200, resp.get_json()
        live += [(when, d) for d in resp.get_json()["decisions"]]

    def key(d: dict[str, object]) -> tuple[object, ...]:
        return tuple(d[k] for k in ("pool", "action", "outcome", "from", "to", "reason"))

    assert [(t, key(d)) for t, d in live] == [(t, key(decision_json(d))) for t, d in replayed.decisions]
    events = client.get("/api/v1/events?limit=500", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    scaled = [e for e in events["events"] if e["outcome"] == "scaled"]
    assert scaled and all("formula" in e["details"] for e in scaled if e["action"] == "scale_out")


def node_aware_config() -> dict[str, Any]:
    return {
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "defaults": {"dedup_window": "1m"},
        "kubernetes": {"host": "https://kubernetes.replay.invalid"},  # never called: both sides get the cluster
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 12, "node_selector": "pool=gpu",
                   "scale_out": {"mode": "proportional", "target_utilization": 70, "max_step": 3, "cooldown": "3m"},
                   "scale_in": {"mode": "proportional", "target_utilization": 70, "max_step": 1, "cooldown": "5m",
                                "delay_after_scale_out": "5m", "stabilization_window": "5m", "victims": "idle"},
                   "simulated": {"initial_count": 2, "provision_seconds": 240}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "3m",
                   "rules": [{"alert": "GPUHigh", "above": 80, "for": "1m", "pool": "gpu", "action": "scale_out"},
                             {"alert": "GPULow", "below": 40, "for": "5m", "pool": "gpu", "action": "scale_in"}]},
    }


def _key(d: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(d[k] for k in ("pool", "action", "outcome", "from", "to", "reason"))


def _drive_with_cluster(settings: Any, demand: list[float], notifications: list[tuple[float, dict[str, Any]]],
                        tmp_path: Path, reconciles: Sequence[float] = ()
                        ) -> tuple[list[tuple[float, dict[str, Any]]], Any, ReplayCluster]:
    """The live app, given a cluster holding the same work at the same moments as the replay's, sent the replay's
    notifications and ticked at its reconciler's deciding ticks, in the replay's order of events (trace minutes,
    evaluations, notifications, reconciler ticks)."""
    provider = SimulatedProvider("gpu", settings.pools["gpu"].provider_settings)
    cluster = ReplayCluster(provider.node_names(), 8, 240, T0)
    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, store=SqlStore(f"sqlite:///{tmp_path}/live.db"),
                     startup_check=False, providers={"gpu": provider}, cluster=cluster)
    client = app.test_client()
    events: list[tuple[float, int, int]] = [(T0 + 60 * i, 0, i) for i in range(len(demand))]
    events += [(T0 + 30 * k, 1, 0) for k in range(2 * len(demand))]
    events += [(when, 2, i) for i, (when, _) in enumerate(notifications)]
    events += [(when, 3, 0) for when in reconciles]
    heapq.heapify(events)
    reconciler = app.extensions["autoscaler_reconciler"]
    live = []
    while events:
        when, kind, index = heapq.heappop(events)
        clock.now = when
        cluster.place(when)
        if kind == 0:
            cluster.set_demand(demand[index], when)
        elif kind == 2:
            resp = client.post("/webhook/alertmanager", json=notifications[index][1],
                               headers={"Authorization": f"Bearer {TOKEN}"})
            assert resp.status_code == 200, resp.get_json()
            live += [(when, d) for d in resp.get_json()["decisions"]]
            cluster.follow(provider.node_names(), when)
        elif kind == 3:
            live += [(when, decision_json(d)) for d in reconciler.tick(when).decisions]
            cluster.follow(provider.node_names(), when)
    return live, client, cluster


def test_node_aware_scale_in_same_decisions_live_and_replayed(tmp_path: Path) -> None:
    """victims: idle: the live app, given a cluster holding the same work at the same moments, picks, keeps and
    removes the same nodes as the replay."""
    settings = build_settings(node_aware_config(), env={})
    demand = [1.0] * 10 + [3.0] * 20 + [7.5] * 40 + [2.0] * 60 + [0.5] * 60 + [0.0] * 30
    trace = Trace(T0, tuple(demand))
    replayed = simulate(settings, trace)
    scaled_in = [d for _, d in replayed.decisions if d.outcome.value == "scaled" and d.action == "scale_in"]
    in_use = [d for _, d in replayed.decisions if d.outcome.value == "skipped_in_use"]
    assert scaled_in and in_use and all(d.details["nodes"] for d in scaled_in)
    assert any(d.details["nodes"] != [f"gpu-node-{d.from_:04d}"] for d in scaled_in), "idle is not the newest"

    live, client, cluster = _drive_with_cluster(settings, demand, replayed.notifications, tmp_path)
    assert [(t, _key(d)) for t, d in live] == [(t, _key(decision_json(d))) for t, d in replayed.decisions]
    events = client.get("/api/v1/events?limit=500", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    removed = [e["details"]["nodes"] for e in reversed(events["events"])
               if e["outcome"] == "scaled" and e["action"] == "scale_in"]
    assert removed == [d.details["nodes"] for d in scaled_in]
    assert cluster.interrupted_node_minutes == replayed.interrupted_node_minutes == 0.0


def test_demand_mode_schedules_and_in_flight_decide_alike_live_and_replayed(tmp_path: Path) -> None:
    raw = {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "reconcile_interval": "30s"},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 12, "gpus_per_node": 8,
                   "provision_time": "8m",
                   "scale_out": {"mode": "demand", "cooldown": "1m"},
                   "scale_in": {"step": 1, "cooldown": "5m", "delay_after_scale_out": "5m"},
                   "schedules": [{"cron": "0 3 * * *", "duration": "30m", "min": 5, "timezone": "UTC"}],
                   "simulated": {"initial_count": 2, "provision_seconds": 480, "busy_seconds": 60}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "2m",
                   "rules": [{"alert": "GPUDemandPending", "pending_above": 0, "for": "1m", "pool": "gpu",
                              "action": "scale_out"},
                             {"alert": "GPULow", "below": 40, "for": "5m", "pool": "gpu", "action": "scale_in"}]},
    }
    settings = build_settings(raw, env={})
    demand = [1.0] * 20 + [6.0] * 40 + [1.0] * 180
    replayed = simulate(settings, Trace(T0, tuple(demand)))
    scaled = [d for _, d in replayed.decisions if d.outcome.value == "scaled"]
    assert any("in flight" in d.reason for _, d in replayed.decisions)  # the demand formula met booting nodes
    assert replayed.reconciles and max(m.requested for m in replayed.minutes) <= 6  # no overshoot past demand
    assert any(d.to == 5 for d in scaled)  # the 03:00 window

    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, store=SqlStore(f"sqlite:///{tmp_path}/live2.db"),
                     startup_check=False)
    client = app.test_client()
    reconciler = app.extensions["autoscaler_reconciler"]
    steps = sorted([(t, 0, i) for i, (t, _) in enumerate(replayed.notifications)]
                   + [(t, 1, -1) for t in replayed.reconciles])
    live: list[tuple[float, dict[str, object]]] = []
    for when, kind, index in steps:
        clock.now = when
        if kind == 1:
            live += [(when, decision_json(d)) for d in reconciler.tick(when).decisions]
            continue
        resp = client.post("/webhook/alertmanager", json=replayed.notifications[index][1],
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200, resp.get_json()
        live += [(when, d) for d in resp.get_json()["decisions"]]

    def key(d: dict[str, object]) -> tuple[object, ...]:
        return tuple(d[k] for k in ("pool", "action", "outcome", "from", "to", "reason"))

    assert [(t, key(d)) for t, d in live] == [(t, key(decision_json(d))) for t, d in replayed.decisions]
    sources = {e["source"] for e in client.get("/api/v1/events?limit=500",
                                               headers={"Authorization": f"Bearer {TOKEN}"}).get_json()["events"]}
    assert {"schedule", "alertmanager"} <= sources


def test_headroom_decides_alike_live_and_replayed(tmp_path: Path) -> None:
    """Headroom from the alert's value (no cluster): demand mode keeps 2 nodes above need, a window lowers it to 0;
    the live service, sent the replay's notifications, decides the same with the same reasons."""
    raw = {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "reconcile_interval": "30s"},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 12, "gpus_per_node": 8,
                   "provision_time": "4m",
                   "scale_out": {"mode": "demand", "cooldown": "1m", "headroom": {"nodes": 2}},
                   "scale_in": {"step": 1, "cooldown": "3m", "delay_after_scale_out": "3m"},
                   "schedules": [{"cron": "0 2 * * *", "duration": "2h", "headroom": {"nodes": 0}}],
                   "simulated": {"initial_count": 2, "provision_seconds": 240, "busy_seconds": 60}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "2m",
                   "rules": [{"alert": "GPUDemandPending", "pending_above": 0, "for": "1m", "pool": "gpu",
                              "action": "scale_out"},
                             {"alert": "GPULow", "below": 60, "for": "3m", "pool": "gpu", "action": "scale_in"}]},
    }
    settings = build_settings(raw, env={})
    demand = [1.5] * 20 + [5.0] * 40 + [1.0] * 80 + [4.0] * 40 + [1.0] * 60
    replayed = simulate(settings, Trace(T0, tuple(demand)))
    reasons = [d.reason for _, d in replayed.decisions]
    assert any("raised to" in r and "headroom 2 node(s)" in r for r in reasons)  # a scale-out above need
    assert any("scale-in stops at the headroom" in r for r in reasons)  # and a scale-in held by it
    requested = [m.requested for m in replayed.minutes]
    assert max(requested[20:60]) >= 7  # 5 nodes of work + 2 spare
    assert max(requested[140:180]) <= 5  # the 02:00 window: no headroom, 4 nodes of work

    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, store=SqlStore(f"sqlite:///{tmp_path}/live3.db"),
                     startup_check=False)
    client = app.test_client()
    reconciler = app.extensions["autoscaler_reconciler"]
    steps = sorted([(t, 0, i) for i, (t, _) in enumerate(replayed.notifications)]
                   + [(t, 1, -1) for t in replayed.reconciles])
    live: list[tuple[float, dict[str, Any]]] = []
    for when, kind, index in steps:
        clock.now = when
        if kind == 1:
            live += [(when, decision_json(d)) for d in reconciler.tick(when).decisions]
            continue
        resp = client.post("/webhook/alertmanager", json=replayed.notifications[index][1],
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200, resp.get_json()
        live += [(when, d) for d in resp.get_json()["decisions"]]
    assert [(t, _key(d)) for t, d in live] == [(t, _key(decision_json(d))) for t, d in replayed.decisions]


def test_headroom_from_the_cluster_decides_alike_live_and_replayed(tmp_path: Path) -> None:
    """With a cluster (``kubernetes:``), need is the GPUs requested on Ready nodes: both sides read the same pods."""
    raw = node_aware_config()
    raw["pools"][0]["scale_out"] = {**raw["pools"][0]["scale_out"], "headroom": {"gpus": 12}}
    settings = build_settings(raw, env={})
    demand = [1.0] * 10 + [3.0] * 20 + [7.5] * 40 + [2.0] * 60 + [0.5] * 60 + [0.0] * 30
    replayed = simulate(settings, Trace(T0, tuple(demand)))
    shaped = [d for _, d in replayed.decisions if "headroom 12 GPU(s)" in d.reason]
    assert shaped and all("the cluster:" in d.reason for d in shaped)
    topped = [d for _, d in replayed.decisions if d.reason.startswith("spare below the headroom")]
    assert topped and replayed.reconciles  # the reconciler kept the spare without waiting for an alert
    # ticked wherever the replay read the headroom (deciding or not: each reading is remembered for the scale-in)
    assert set(replayed.reconciles) <= set(replayed.headroom_reads)
    live, _, _ = _drive_with_cluster(settings, demand, replayed.notifications, tmp_path, replayed.headroom_reads)
    assert [(t, _key(d)) for t, d in live] == [(t, _key(decision_json(d))) for t, d in replayed.decisions]
