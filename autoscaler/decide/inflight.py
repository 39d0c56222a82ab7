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

    @property
    def claims_unread(self) -> str: ...  # "" unless DRA was not read (403) and a pod on it holds claims

    @property
    def dra_unread(self) -> str: ...  # DRA's status ("403") when not read and the node has no device-plugin GPU

    @property
    def ready_since(self) -> float: ...  # its Ready condition's lastTransitionTime (0.0 when not given)


def gpu_ready(node: NodeLike) -> bool:
    """Ready with GPUs allocatable, or, while DRA cannot be read (403), Ready with a pod holding claims on it: its
    GPUs are there but not seen, and it must not be taken for a node still booting or never delivered."""
    return node.ready and (node.gpu_allocatable > 0 or bool(node.claims_unread))


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
    booting = [n for n in seen if now - n.created < provision_time and not gpu_ready(n)]
    unregistered = max(0, current - len(seen))
    count = min(current, len(booting) + unregistered) if current > 0 else len(booting)
    return count, (f"{len(booting)} node(s) of the cluster created in the last {provision_time:.0f}s not Ready or "
                   f"without GPUs allocatable yet, {unregistered} asked for but not registered yet")


#: The code a pool's shortfall carries when the cluster, not the cloud, shows it (cluster-autoscaler's
#: max-node-provision-time): nodes asked for that never registered Ready with GPUs allocatable.
NOT_REGISTERED = "NodesNotReadyInTime"


def went_down(node: NodeLike, provision_time: float) -> bool:
    """Not Ready now, but its Ready condition changed more than ``provision_time`` after it was created: it came
    (a node never Ready keeps the condition it registered with, or changes it within its boot) and went down later,
    a kubelet's blip or a broken node: the repair's matter (docs/repair.md), not a node the cloud failed to deliver."""
    return not node.ready and node.created > 0 and node.ready_since > node.created + provision_time


def unregistered(nodes: Iterable[NodeLike], asked: int, now: float, provision_time: float,
                 last_scale_out: float | None, noticed_since: float | None) -> tuple[int, str] | None:
    """Nodes the pool was asked for that are not Ready with GPUs allocatable although the newest scale-out is older
    than ``provision_time``: (how many are Ready with GPUs, a sentence), else None. A scale-out already noticed
    (at or before ``noticed_since``, when the pool was last marked short) is not noticed again. A node that came and
    went down later (``went_down``) counts as delivered."""
    if last_scale_out is None or now - last_scale_out < provision_time:
        return None
    if noticed_since is not None and last_scale_out <= noticed_since:
        return None
    seen = list(nodes)
    # DRA not read (403) while some node of the pool runs claim-holding pods: the pool uses DRA, so a Ready node
    # without device-plugin GPUs has GPUs the service cannot see, not none (no shortfall claimed on no evidence)
    uses_dra = any(n.claims_unread for n in seen)
    ready = sum(1 for n in seen if gpu_ready(n) or uses_dra and n.ready and n.dra_unread
                or went_down(n, provision_time))
    if ready >= asked:
        return None
    unseen = [] if uses_dra else sorted({n.dra_unread for n in seen if n.ready and not gpu_ready(n) and n.dra_unread})
    blind = (f"; DRA not read ({', '.join(unseen)}): the GPUs of a node without device-plugin GPUs and without a "
             "pod holding claims are not seen, grant the resource.k8s.io RBAC (docs/dra.md)") if unseen else ""
    return ready, (f"{asked - ready} of {asked} node(s) asked for have not registered Ready with GPUs allocatable "
                   f"within provision_time ({provision_time:.0f}s) of the last scale-out{blind}")
