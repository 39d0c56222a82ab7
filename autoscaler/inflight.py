"""Nodes in flight: asked for less than ``provision_time`` ago and not ready yet. Pure: ``now`` is passed in.

Two ways to count them, depending on what the service can see:
- with a view of the cluster (``kubernetes:`` configured), the pool's nodes created within ``provision_time``
  that are not Ready or have no GPU allocatable yet, plus the machines the cloud counts that have not registered
  as nodes yet (``from_nodes``);
- without it, the nodes the scale-outs of the last ``provision_time`` added (``from_scale_outs``): the service
  cannot tell a booted node from a booting one, so it assumes each takes the whole ``provision_time``.
"""
from __future__ import annotations

from typing import Iterable, Protocol, Sequence


class NodeLike(Protocol):
    """What ``from_nodes`` reads of a node (``autoscaler.cluster.nodes.NodeView`` has these fields)."""

    @property
    def ready(self) -> bool: ...

    @property
    def gpu_allocatable(self) -> int: ...

    @property
    def created(self) -> float: ...


def from_scale_outs(scale_outs: Sequence[tuple[float, int, int]], current: int, now: float,
                    provision_time: float) -> tuple[int, str]:
    """Nodes added by the scale-outs (time, from, to) of the last ``provision_time``, less the sizes given back after
    a shortfall (to < from: what the cloud never delivered is not on its way), at most ``current``."""
    if provision_time <= 0:
        return 0, "provision_time is 0: nodes are ready as soon as they are asked for"
    recent = [(t, a, b) for t, a, b in scale_outs if now - provision_time <= t <= now and b != a]
    grown = [(t, a, b) for t, a, b in recent if b > a]
    given_back = sum(a - b for _, a, b in recent if b < a)
    count = max(0, min(sum(b - a for _, a, b in grown) - given_back, current))
    if not grown:
        return 0, f"no scale-out in the last {provision_time:.0f}s (provision_time)"
    youngest = now - max(t for t, _, _ in grown)
    back = f"; {given_back} given back undelivered" if given_back else ""
    return count, (f"{count} node(s) added by {len(grown)} scale-out(s) in the last {provision_time:.0f}s "
                   f"(provision_time; the newest {youngest:.0f}s ago){back}")


def from_nodes(nodes: Iterable[NodeLike], current: int, now: float, provision_time: float) -> tuple[int, str]:
    """The pool's nodes created within ``provision_time`` that are not Ready or have no GPU allocatable yet, plus
    the machines the cloud counts (``current``) that have not registered as nodes yet; at most ``current``.

    A node that stays not Ready past ``provision_time`` is broken, not booting: it no longer counts.
    """
    seen = list(nodes)
    booting = [n for n in seen if now - n.created < provision_time and (not n.ready or n.gpu_allocatable <= 0)]
    unregistered = max(0, current - len(seen))
    count = min(current, len(booting) + unregistered) if current > 0 else len(booting)
    return count, (f"{len(booting)} node(s) of the cluster created in the last {provision_time:.0f}s not Ready or "
                   f"without GPUs allocatable yet, {unregistered} asked for but not registered yet")


#: The code a pool's shortfall carries when the cluster, not the cloud, shows it (cluster-autoscaler's
#: max-node-provision-time): nodes asked for that never registered Ready with GPUs allocatable.
NOT_REGISTERED = "NodesNotReadyInTime"


def unregistered(nodes: Iterable[NodeLike], asked: int, now: float, provision_time: float,
                 last_scale_out: float | None, noticed_since: float | None) -> tuple[int, str] | None:
    """Nodes the pool was asked for that are not Ready with GPUs allocatable although the newest scale-out is older
    than ``provision_time``: (how many are Ready with GPUs, a sentence), else None. A scale-out already noticed
    (at or before ``noticed_since``, when the pool was last marked short) is not noticed again."""
    if last_scale_out is None or now - last_scale_out < provision_time:
        return None
    if noticed_since is not None and last_scale_out <= noticed_since:
        return None
    ready = sum(1 for n in nodes if n.ready and n.gpu_allocatable > 0)
    if ready >= asked:
        return None
    return ready, (f"{asked - ready} of {asked} node(s) asked for have not registered Ready with GPUs allocatable "
                   f"within provision_time ({provision_time:.0f}s) of the last scale-out")
