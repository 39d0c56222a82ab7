"""The peers a user would otherwise pick, replayed on the same trace: cluster-autoscaler, with and without
overprovisioning pause pods.

The model (docs/replay.md, "Peers"): cluster-autoscaler sees pending pods, not alerts. Its loop runs every
``--scan-interval`` (10 s); the demand of a trace minute appears at the minute's start and is acted on one scan
later. Scale-up: when the nodes' worth of pending work, ``ceil(demand)`` plus ``overprovision`` nodes of pause pods
(lower priority, preempted by real pods, which makes them pending in turn), does not fit on the nodes the pool
has or is booting, the node group is raised to exactly that (clamped to ``[min, max]``); a new node is ready
``boot`` seconds later, as in our replay. Scale-down: while the nodes' GPU utilisation (the work and the pause
pods spread evenly over the nodes, as kube-scheduler's default spreads them) is under the threshold (0.5), the
nodes beyond that need are unneeded (the newest first: the work fits on the older ones); a node unneeded for
``--scale-down-unneeded-time`` (10 min), while no node was added in the last ``--scale-down-delay-after-add``
(10 min), is removed, all such nodes at once. Pure: no clock, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from autoscaler.replay.trace import STEP

SCAN_INTERVAL = 10.0  # cluster-autoscaler's --scan-interval default
UNNEEDED_TIME = 600.0  # --scale-down-unneeded-time
DELAY_AFTER_ADD = 600.0  # --scale-down-delay-after-add
UTILIZATION_THRESHOLD = 0.5  # --scale-down-gpu-utilization-threshold (and --scale-down-utilization-threshold)


@dataclass(frozen=True)
class PeerSettings:
    """One cluster-autoscaler run: its flags (the defaults) and the node group's limits and boot time."""

    boot: float  # seconds from a node's request to Ready (the replay's provision_seconds)
    low: int = 0  # the node group's min
    high: int = 10 ** 6  # its max
    initial: int = 0  # nodes at the start
    overprovision: int = 0  # nodes' worth of pause pods
    scan_interval: float = SCAN_INTERVAL
    unneeded_time: float = UNNEEDED_TIME
    delay_after_add: float = DELAY_AFTER_ADD
    threshold: float = UTILIZATION_THRESHOLD


@dataclass
class PeerRun:
    """A peer's replay: ready and requested nodes at the start of each minute, and its scale actions."""

    start: float
    demand: list[float]
    ready: list[int] = field(default_factory=list)
    requested: list[int] = field(default_factory=list)
    actions: list[tuple[float, str, int]] = field(default_factory=list)  # (time, scale_out|scale_in, new size)


def need(demand: float, ca: PeerSettings) -> int:
    """The nodes cluster-autoscaler keeps for a minute's demand: whole nodes of work plus the pause pods' nodes."""
    return max(ca.low, min(ca.high, math.ceil(demand - 1e-9) + ca.overprovision))


def cluster_autoscaler(demand: Sequence[float], start: float, ca: PeerSettings) -> PeerRun:
    """Replay ``demand`` (nodes of work a minute from ``start``) with cluster-autoscaler's scale-up and scale-down."""
    run = PeerRun(start, list(demand))
    ready_at = [start - 1.0] * max(ca.low, min(ca.high, ca.initial))  # each node's Ready time, oldest first
    unneeded: list[float | None] = [None] * len(ready_at)  # since when each node is unneeded
    last_add: float | None = None
    for i, d in enumerate(demand):
        minute = start + STEP * i
        run.ready.append(sum(1 for t in ready_at if t <= minute))
        run.requested.append(len(ready_at))
        now = minute + ca.scan_interval  # the first scan that sees the minute's pods
        want = need(d, ca)
        if want > len(ready_at):
            ready_at += [now + ca.boot] * (want - len(ready_at))
            unneeded += [None] * (want - len(unneeded))
            last_add = now
            run.actions.append((now, "scale_out", want))
            continue
        busy = len(ready_at) and (d + ca.overprovision) / len(ready_at) >= ca.threshold
        unneeded = [None if k < want or busy else (since if since is not None else now)
                    for k, since in enumerate(unneeded)]
        if last_add is not None and now - last_add < ca.delay_after_add:
            continue
        keep = [k for k, since in enumerate(unneeded) if since is None or now - since < ca.unneeded_time]
        if len(keep) < len(ready_at):
            ready_at = [ready_at[k] for k in keep]
            unneeded = [unneeded[k] for k in keep]
            run.actions.append((now, "scale_in", len(ready_at)))
    return run


def peer_figures(run: PeerRun, gpus_per_node: int, foresight: float) -> dict[str, Any]:
    """The figures summary.json gives a baseline, for a peer (no interrupted work: see docs/replay.md)."""
    minutes = len(run.demand)
    saturated = sum(1 for d, r in zip(run.demand, run.ready) if d > r + 1e-9)
    kinds = [kind for _, kind, _ in run.actions]
    hours = round(sum(run.ready) / 60.0, 4)
    return {
        "node_hours": hours,
        "saturated_minutes": saturated,
        "saturated_pct": round(100.0 * saturated / minutes, 3) if minutes else 0.0,
        "minutes_above_90": sum(1 for d, r in zip(run.demand, run.ready) if (100.0 if r <= 0 and d > 0 else
                                                                              100.0 * d / max(r, 1)) > 90.0),
        "unmet_demand_gpu_minutes": round(sum(max(0.0, d - r) for d, r in zip(run.demand, run.ready))
                                          * gpus_per_node, 4),
        "scale_actions": len(kinds),
        "direction_changes": sum(1 for a, b in zip(kinds, kinds[1:]) if a != b),
        "minutes": minutes,
        "peak_ready": max(run.ready, default=0),
        "vs_foresight": round(hours / foresight, 4) if foresight else None,
    }


__all__ = ["PeerRun", "PeerSettings", "cluster_autoscaler", "need", "peer_figures"]
