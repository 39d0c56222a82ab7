"""Will a node's pods fit on the nodes that stay (pure): the scheduler's filters a scale-in must not guess wrong.

Checked per pod, as kube-scheduler's filters do: every resource it requests (GPUs, CPU, memory, any other)
against the node's allocatable minus what its pods already request, its ``nodeSelector`` and required node
affinity against the node's labels, and its tolerations against the node's NoSchedule/NoExecute taints. Pods are
placed one by one, the biggest GPU request first, each on the fitting node with the most free GPUs (the default
spreading), and what one takes is gone for the next; where it lands counts for the pods after it in the
topology spread and the inter-pod (anti-)affinity (:mod:`autoscaler.cluster.interpod`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from decimal import Decimal
from typing import Mapping, Sequence

from autoscaler.cluster.interpod import Neighbours, has_rules
from autoscaler.cluster.labels import requirement_met
from autoscaler.cluster.pods import PodFacts, Toleration
from autoscaler.cluster.topology import Spread

_BLOCKING = ("NoSchedule", "NoExecute")
SHOWN = 2  # nodes whose refusal a reason names


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass
class Room:
    """A node that stays, as the fit sees it: labels, taints, what is still free on it and the pods on it (those
    the fit places there too). One that does not take pods (cordoned, not Ready) is there for its pods."""

    name: str
    labels: Mapping[str, str]
    taints: Sequence[Taint]
    free: dict[str, Decimal] = field(default_factory=dict)
    gpu_resources: frozenset[str] = frozenset()
    pods: list[PodFacts] = field(default_factory=list)
    takes: bool = True

    def free_gpus(self) -> Decimal:
        return sum((v for k, v in self.free.items() if k in self.gpu_resources), Decimal(0))


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    """Whether one of the pod's tolerations matches the taint (key, value or Exists, effect or any)."""
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.key):
            return True
        if t.operator != "Exists" and t.key == taint.key and t.value == taint.value:
            return True
    return False


def _label_refusal(pod: PodFacts, room: Room) -> str | None:
    """Why the node's labels keep the pod off it (nodeSelector, required node affinity), None when they don't."""
    labels = {**room.labels, "metadata.name": room.name}
    for key, value in pod.node_selector:
        if room.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if pod.affinity and not any(all(requirement_met(r, labels) for r in term) for term in pod.affinity):
        return "required node affinity does not match"
    return None


def _taint_refusal(pod: PodFacts, room: Room) -> str | None:
    for taint in room.taints:
        if taint.effect in _BLOCKING and not tolerates(pod.tolerations, taint):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    return None


def _eligible(pod: PodFacts, room: Room, spread: Spread) -> bool:
    """Whether the node's domain counts for the pod's spread constraint (nodeAffinityPolicy, nodeTaintsPolicy)."""
    return ((not spread.honor_affinity or _label_refusal(pod, room) is None)
            and (not spread.honor_taints or _taint_refusal(pod, room) is None))


def refusal(pod: PodFacts, room: Room) -> str | None:
    """Why ``pod`` cannot run on ``room`` now by the node's own facts (labels, taints, room), None when it can."""
    why = _label_refusal(pod, room) or _taint_refusal(pod, room)
    if why:
        return why
    for resource, amount in pod.requests:
        have = room.free.get(resource, Decimal(0))
        if amount > have:
            return f"needs {resource} {_show(amount)}, {_show(max(have, Decimal(0)))} free"
    return None


def _show(amount: Decimal) -> str:
    return f"{amount.normalize():f}" if amount < 10**6 else f"{amount / 2**30:.1f}Gi"


def place_all(pods: Sequence[PodFacts], rooms: Sequence[Room]) -> str | None:
    """Place every pod on the ``rooms`` that take pods (whose free amounts shrink, and pods grow, as pods land);
    None when all fit, else the first pod that fits nowhere and why (the nodes' own words for the first few)."""
    takers = [r for r in rooms if r.takes]
    if not pods:
        return None
    if not takers:
        return f"pod {pods[0].key} has no other node of the pool to go to"
    order = sorted(pods, key=lambda p: (-p.gpus, -dict(p.requests).get("cpu", Decimal(0)), p.key))
    shunners = any(has_rules(r.pods) for r in rooms) or has_rules(pods)
    for pod in order:
        near = Neighbours(pod, rooms, partial(_eligible, pod), shunners)
        refusals: list[tuple[str, str]] = []
        fitting: list[Room] = []
        for room in takers:
            why = refusal(pod, room) or near.refusal(room)
            if why is None:
                fitting.append(room)
            else:
                refusals.append((room.name, why))
        if not fitting:
            named = "; ".join(f"{n}: {w}" for n, w in refusals[:SHOWN])
            more = len(refusals) - SHOWN
            return (f"pod {pod.key} fits on none of the pool's {len(takers)} other nodes ({named}"
                    + (f"; and {more} more" if more > 0 else "") + ")")
        best = max(fitting, key=lambda r: r.free_gpus())  # the first of equals: the order given
        for resource, amount in pod.requests:
            best.free[resource] = best.free.get(resource, Decimal(0)) - amount
        best.pods.append(pod)
    return None
