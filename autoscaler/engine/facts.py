"""What a decision knows of a pool besides the cloud's count, and the view of the cloud it leaves behind.

``pool_facts`` gathers nodes in flight (``autoscaler/decide/inflight.py``, pure) and the floor in force now
(``autoscaler/decide/schedules.py``); ``view_after`` is the pool's stored cloud view once a decision read the cloud and
perhaps scaled it (what ``GET /api/v1/pools`` shows until the reconciler's next read).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from autoscaler.decide.inflight import from_nodes, from_scale_outs
from autoscaler.models import CloudStatus, Decision, Outcome, PoolFacts, PoolSpec
from autoscaler.cluster.nodes import NodeView
from autoscaler.decide.schedules import effective_headroom, effective_min
from autoscaler.store import PoolView, Store


def pool_facts(store: Store, spec: PoolSpec, current: int | None, now: float,
               nodes: Sequence[NodeView] | None = None, pods: Sequence[NodeView] | None = None,
               undelivered: int = 0) -> PoolFacts:
    """Nodes in flight, the floor and the headroom in force now: what a decision needs besides the cloud's count.

    In flight is counted from the pool's ``nodes`` when the cluster gave them, else from the recorded
    scale-outs of the last ``provision_time`` (one small query); nodes the cloud reports it could not deliver
    (``undelivered``) are not on their way and do not count. ``pods``: the pool's nodes with their pods, read
    for the headroom (the GPUs requested on Ready nodes), None where the cluster is not read."""
    floor, floor_how = effective_min(spec, now)
    counted = from_nodes(nodes, current or 0, now, spec.provision_time) if nodes is not None else None
    if counted is None:
        since = now - spec.provision_time
        counted = from_scale_outs(store.scale_outs(spec.name, since), current or 0, now, spec.provision_time)
    in_flight, how = counted
    if undelivered > 0:
        in_flight, how = max(0, in_flight - undelivered), f"{how}; {undelivered} the cloud could not deliver"
    return replace(headroom_facts(spec, now, pods), in_flight=in_flight, in_flight_how=how, floor=floor,
                   floor_how=floor_how)


def headroom_facts(spec: PoolSpec, now: float, pods: Sequence[NodeView] | None) -> PoolFacts:
    """The headroom in force now (a window's; None: the pool's own) and, from the pool's nodes with their pods where
    the cluster was read, the GPUs requested on Ready nodes."""
    room, room_how = effective_headroom(spec, now)
    used, used_how = used_on_nodes(pods, spec.gpus_per_node or 8) if pods is not None else (None, "")
    return PoolFacts(headroom=room if room_how else None, headroom_how=room_how, used=used, used_how=used_how)


def keeps_headroom(spec: PoolSpec) -> bool:
    """Whether the pool, or one of its schedule windows, keeps headroom (its decisions then read the pods)."""
    return spec.scale_out.headroom is not None or any(w.headroom is not None for w in spec.schedules)


def used_on_nodes(views: Iterable[NodeView], gpus_per_node: int) -> tuple[float, str]:
    """Nodes' worth of GPUs requested on the pool's Ready, schedulable nodes, and a sentence on the spare ones."""
    used = spare_gpus = spare_nodes = ready = 0
    for view in views:
        if not view.ready or view.cordoned or view.gpu_allocatable <= 0:
            continue
        ready += 1
        taken = min(view.gpu_allocatable, view.gpus_used())  # a claim several pods share: once
        used += taken
        spare_gpus += view.gpu_allocatable - taken
        spare_nodes += taken < view.gpu_allocatable
    per = max(gpus_per_node, 1)
    return used / per, (f"the cluster: {ready} Ready node(s), {spare_nodes} with free GPUs ({spare_gpus} GPU(s) "
                        f"free), {used} GPU(s) requested")





def view_after(spec: PoolSpec, cloud: CloudStatus, facts: PoolFacts, decision: Decision, now: float) -> PoolView:
    """The pool's cloud view once a decision read it and, if it scaled, asked for ``decision.to`` nodes."""
    if decision.outcome is not Outcome.SCALED or decision.to is None or decision.from_ is None:
        return PoolView(spec.name, cloud.current, cloud.busy, cloud.detail, facts.in_flight, None, now)
    added = max(0, decision.to - decision.from_) if spec.provision_time > 0 else 0  # 0: ready when asked for
    return PoolView(spec.name, decision.to, cloud.busy, f"{decision.from_} -> {decision.to} asked for by this service",
                    min(facts.in_flight + added, decision.to), None, now)
