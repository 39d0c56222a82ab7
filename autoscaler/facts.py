"""What a decision knows of a pool besides the cloud's count, and the view of the cloud it leaves behind.

``pool_facts`` gathers nodes in flight (``autoscaler/inflight.py``, pure) and the floor in force now
(``autoscaler/schedules.py``); ``view_after`` is the pool's stored cloud view once a decision read the cloud and
perhaps scaled it (what ``GET /api/v1/pools`` shows until the reconciler's next read).
"""
from __future__ import annotations

from typing import Sequence

from autoscaler.inflight import from_nodes, from_scale_outs
from autoscaler.models import CloudStatus, Decision, Outcome, PoolFacts, PoolSpec
from autoscaler.nodes import NodeView
from autoscaler.schedules import effective_min
from autoscaler.store import PoolView, Store


def pool_facts(store: Store, spec: PoolSpec, current: int | None, now: float,
               nodes: Sequence[NodeView] | None = None) -> PoolFacts:
    """Nodes in flight and the floor in force now: what a decision needs besides the cloud's count.

    In flight is counted from the pool's ``nodes`` when the cluster gave them, else from the recorded
    scale-outs of the last ``provision_time`` (one small query)."""
    floor, floor_how = effective_min(spec, now)
    counted = from_nodes(nodes, current or 0, now, spec.provision_time) if nodes is not None else None
    if counted is None:
        since = now - spec.provision_time
        counted = from_scale_outs(store.scale_outs(spec.name, since), current or 0, now, spec.provision_time)
    return PoolFacts(in_flight=counted[0], in_flight_how=counted[1], floor=floor, floor_how=floor_how)


def view_after(spec: PoolSpec, cloud: CloudStatus, facts: PoolFacts, decision: Decision, now: float) -> PoolView:
    """The pool's cloud view once a decision read it and, if it scaled, asked for ``decision.to`` nodes."""
    if decision.outcome is not Outcome.SCALED or decision.to is None or decision.from_ is None:
        return PoolView(spec.name, cloud.current, cloud.busy, cloud.detail, facts.in_flight, None, now)
    added = max(0, decision.to - decision.from_) if spec.provision_time > 0 else 0  # 0: ready when asked for
    return PoolView(spec.name, decision.to, cloud.busy, f"{decision.from_} -> {decision.to} asked for by this service",
                    min(facts.in_flight + added, decision.to), None, now)
