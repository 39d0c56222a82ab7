"""Headroom: spare ready capacity a pool keeps above what it needs, so new work lands on a booted node instead of
waiting a whole boot. Pure: no I/O, no clock.

Every alert-driven target has a floor under it, ``ceil(need + headroom)`` nodes (never above max), the headroom in
nodes' worth: N nodes, G GPUs / ``gpus_per_node``, or F x need. A scale-out goes at least to the floor (demand
mode: target = need + headroom; utilisation modes: the floor under the formula's or the step's target); a scale-in
stops at it. What "need" is depends on what the decision knows, best first:

- the cluster was read (``kubernetes:``): the GPUs requested on the pool's Ready nodes, in nodes' worth (spare are
  the Ready nodes' free GPU allocatable), plus a demand-mode scale-out's pending GPUs;
- demand mode (scale-out), the alert's value being the pending GPUs: the ready nodes (all taken, since work waits)
  plus the pending GPUs in nodes;
- step and proportional modes: the ready nodes x the alert's value / 100, the value read as the pool's average GPU
  utilisation (what the replay's and the shipped rules send; a value outside 0-100 is not a utilisation);
- otherwise (no usable value, such as a manual step): unknown, and no floor.

Spare is then what the pool has (its count, nodes in flight included: they will be ready soon) minus that need.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autoscaler.models import Action, Headroom, Mode, PoolFacts, PoolSpec, Signal

EPSILON = 1e-9


@dataclass(frozen=True)
class Floor:
    """The least a decision may leave the pool at to keep its headroom, and how that was worked out."""

    nodes: int
    how: str
    details: dict[str, Any] = field(default_factory=dict)


def need(signal: Signal, spec: PoolSpec, current: int, facts: PoolFacts) -> tuple[float | None, str]:
    """Nodes' worth of work the pool needs now, and how it was read; None when nothing tells (see the module)."""
    action = signal.action
    assert action is not None
    per = spec.gpus_per_node or 8
    ready = max(0, current - max(0, min(facts.in_flight, current)))
    value = signal.value
    mode = spec.direction(action).mode
    pending = (value / per if action is Action.SCALE_OUT and mode is Mode.DEMAND and value is not None
               and value >= 0 else None)
    if facts.used is not None:
        more = f" + {value:g} pending GPU(s)" if pending else ""
        return facts.used + (pending or 0.0), f"{facts.used_how}{more}"
    if pending is not None:
        return ready + pending, f"{ready} ready node(s) + {value:g} pending GPU(s) / {per}"
    if mode is not Mode.DEMAND and value is not None and 0 <= value <= 100:
        return ready * value / 100.0, f"{ready} ready node(s) x {value:g}% utilisation"
    return None, ""


def floor(signal: Signal, spec: PoolSpec, current: int, facts: PoolFacts) -> Floor | None:
    """``ceil(need + headroom)`` at most max, for a signal with a direction; None without headroom, without a need
    to measure it against, or for an explicit target (the operator's size, a schedule's floor)."""
    room: Headroom | None = facts.headroom if facts.headroom is not None else spec.scale_out.headroom
    if room is None or signal.action is None or signal.target is not None:
        return None
    needed, how = need(signal, spec, current, facts)
    if needed is None:
        return None
    extra = room.in_nodes(needed, spec.gpus_per_node or 8)
    nodes = min(spec.max, max(0, math.ceil(needed + extra - EPSILON)))
    where = f", {facts.headroom_how}" if facts.headroom_how else ""
    text = (f"headroom {room.describe()}{where}: need {needed:.2f} node(s) ({how}) + {extra:.2f} spare = {nodes}"
            + (" (max)" if nodes == spec.max else ""))
    return Floor(nodes, text, {"headroom": {"need": round(needed, 3), "spare": round(extra, 3), "floor": nodes,
                                            "how": how}})
