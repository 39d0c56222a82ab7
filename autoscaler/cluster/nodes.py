"""What the service sees of a pool's Kubernetes nodes, and which of them may go (pure: stdlib and models only).

The cluster itself (list, cordon, evict) is behind :class:`Cluster`; ``autoscaler/cluster/kube.py`` implements it with
the official client, the replay with an in-memory one. This module turns the API's plain JSON (camelCase keys, as the
API server sends them) into :class:`NodeView` facts and picks victims from them, so every rule here is table-tested
without a cluster.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Collection, ContextManager, Iterable, Mapping, Protocol, Sequence

from autoscaler.cluster.dra import Dra
from autoscaler.cluster.gpus import GpuPod, count_gpus, extended_pod, matches
from autoscaler.cluster.fit import Room, Taint
from autoscaler.cluster.pods import Budget, PodFacts, quantity, requests_of
from autoscaler.config.common import DEFAULT_GPU_RESOURCES

#: The annotation the service puts on a node it cordons: ``<owner>@<rfc3339 time>``.
CORDON_ANNOTATION = "gpu-autoscaler/cordoned"
#: Appended to the owner once the cloud was asked to remove the node (the sweep then leaves it to the cloud).
REMOVING = "/removing"
#: The annotation on a node provisioned for a ProvisioningRequest (``namespace/name``) while its booking lasts
#: (docs/gang.md): kept from scale-in like a node with GPU work; the service takes it off when the booking ends.
BOOKED_ANNOTATION = "gpu-autoscaler/booked-for"
#: The cordon owner of a node in repair (docs/repair.md): the repair's to lift, never a scale-in's sweep's.
REPAIR_OWNER = "gpu-autoscaler/repair"
SHOWN = 4  # kept nodes named in a reason (the details list more)

#: Node annotations that keep a node, with the value that means "keep".
NODE_PROTECTION = {
    "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
    "karpenter.sh/do-not-disrupt": "true",
}
#: Pod annotations that keep the pod's node, with the value that means "keep".
POD_PROTECTION = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
_FINISHED = ("Succeeded", "Failed")
_MIRROR = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class NodeView:
    """One node of a pool as the scale-in sees it."""

    name: str
    ready: bool
    created: float  # epoch seconds (creationTimestamp)
    cordoned: bool  # spec.unschedulable
    gpu_pods: tuple[GpuPod, ...]
    protected: str | None  # why it must not go (annotation), None if not protected
    cordoned_by_us: float | None  # time in our cordon annotation, None if we did not cordon it
    provider_id: str  # spec.providerID ("" if unknown)
    gpu_allocatable: int  # 0 while the device plugin has not reported yet
    cordon_owner: str = ""  # who put our cordon annotation ("" if none); ends in REMOVING once removal was asked
    pods: tuple[PodFacts, ...] = ()  # every pod that would stop if the node went (GPU work or not)
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    free: tuple[tuple[str, Decimal], ...] = ()  # allocatable minus what all its pods (DaemonSets too) request
    gpu_resources: tuple[str, ...] = ()  # which of its resources are GPUs (kubernetes.gpu_resources, DRA drivers)
    gpu_used: int | None = None  # GPUs its pods hold (None: the sum of its GPU pods' counts)
    claims_unread: str = ""  # why its pods' claims keep it although DRA was not read (403), "" when none
    dra_unread: str = ""  # DRA's status ("403") when it was not read and the node has no device-plugin GPU
    booked: str = ""  # the ProvisioningRequest (``namespace/name``) the node is booked for, "" when none
    gang: str = ""  # the atomic scale-out (gang id) still waiting that the node came for, "" when none
    ready_since: float = 0.0  # its Ready condition's lastTransitionTime (epoch seconds; 0.0 when not given)

    @property
    def gpu_ready(self) -> bool:
        """Ready with GPUs: allocatable ones, or, while DRA cannot be read, a pod holding claims on it (its GPUs
        are there, only not seen)."""
        return self.ready and (self.gpu_allocatable > 0 or bool(self.claims_unread))

    def gpus_used(self) -> int:
        """GPUs requested or allocated on the node (a claim shared by several pods counts once)."""
        return self.gpu_used if self.gpu_used is not None else sum(p.count for p in self.gpu_pods)

    def room(self, takes: bool = True) -> Room:
        """The node as a place the fit may put pods on (a fresh copy: the fit spends it), or with ``takes`` False
        one whose pods count for the others' spread and (anti-)affinity only."""
        return Room(self.name, dict(self.labels), self.taints, dict(self.free), frozenset(self.gpu_resources),
                    list(self.pods), takes and not self.claims_unread)  # unseen claims: its room is unknown

    def busy_reason(self) -> str | None:
        """Why this node must stay (protection first, then GPU work), None when it may go."""
        if self.protected:
            return self.protected
        if self.gpu_pods:
            more = len(self.gpu_pods) - 1
            extra = f" and {more} more GPU pod{'s' if more > 1 else ''}" if more else ""
            return f"runs GPU pod {self.gpu_pods[0].describe()}{extra}"
        if self.booked:
            return f"booked for ProvisioningRequest {self.booked}"
        if self.gang:
            return f"came for atomic scale-out {self.gang}, still waiting for the rest of its nodes"
        return self.claims_unread or None


@dataclass(frozen=True)
class PoolRead:
    """One read of a pool: its nodes (with their pods), the GPUs its unscheduled pods wait for (None: not
    counted), and whether DRA was read (``read``, ``not_read`` with the reason, ``unused``: nothing needed it)."""

    nodes: list[NodeView]
    pending: int | None
    dra: str
    dra_reason: str = ""


class ClusterError(Exception):
    """The API server could not be read or refused a change; the message never holds a credential."""


class ClusterUnreachable(ClusterError):
    """The API server was not reached or gave no whole answer in time (not a refusal): the cluster's other reads
    this tick would wait the same deadline, so they are not asked (reconcile/loop.py)."""


class NodeGone(ClusterError):
    """The node a change was asked of no longer exists (deleted since it was listed): nothing to change."""


@dataclass(frozen=True)
class ClusterCapabilities:
    """What a cluster can do beyond the core of :class:`Cluster`, declared (as a provider declares its
    ``Capabilities``): callers read the flags, nobody probes for methods."""

    lists_budgets: bool = False  # ``budgets``: read only by ``victims: movable``
    reads_pools: bool = False  # ``read_pool`` and ``once``: the reconciler's whole-pool read, DRA read once a tick
    lists_marked: bool = False  # ``marked``: a pool's nodes without their pods, for the stale-cordon sweep
    reads_requests: bool = False  # ``requests``: ProvisioningRequests and PodTemplates (cluster/kube_requests.py)


class Cluster(Protocol):
    """What the scale-in needs of a cluster. Calls may block on the API server for a few seconds. The methods
    after ``evict`` work only where ``capabilities`` declares them."""

    capabilities: ClusterCapabilities

    def nodes(self, selector: Mapping[str, str]) -> list[NodeView]:
        """The nodes matching the label selector, each with its pods (one node list and one pod list for them all)."""

    def node(self, name: str) -> NodeView | None:
        """Re-read one node and its pods; None when it no longer exists."""

    def cordon(self, name: str, owner: str, now: float) -> None:
        """Mark the node unschedulable and put our annotation (owner, time) on it."""

    def uncordon(self, name: str) -> None:
        """Make the node schedulable again and drop our annotation."""

    def evict(self, namespace: str, pod: str) -> str | None:
        """Ask the Eviction API to evict the pod: None when accepted, the refusal (a PDB's 429) otherwise."""

    def budgets(self) -> list[Budget]:
        """``lists_budgets``: every PodDisruptionBudget of the cluster (one call), with the disruptions it allows."""

    def read_pool(self, pool: str, selector: Mapping[str, str], pending: bool = True) -> PoolRead:
        """``reads_pools``: the pool's nodes with their pods and the GPUs its unscheduled pods wait for."""

    def once(self) -> ContextManager[None]:
        """``reads_pools``: within this scope (this thread), the DRA API is read at most once."""

    def marked(self, selector: Mapping[str, str]) -> list[NodeView]:
        """``lists_marked``: the nodes matching the selector (one call), ``gpu_pods`` empty and ``protected`` from
        node annotations only."""


# ---- pods -------------------------------------------------------------------------------------------------------

def is_work(pod: Mapping[str, Any]) -> bool:
    """A pod that would stop if its node went: not a DaemonSet's, not a mirror pod, not finished."""
    meta = pod.get("metadata") or {}
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or ()):
        return False
    if _MIRROR in (meta.get("annotations") or {}):
        return False
    return (pod.get("status") or {}).get("phase") not in _FINISHED


def gpu_pod(pod: Mapping[str, Any], patterns: Sequence[str] = DEFAULT_GPU_RESOURCES) -> GpuPod | None:
    """The pod as GPU work by its extended resources, or None. Init containers count too (they hold the GPU while
    they run)."""
    return extended_pod(pod, patterns) if is_work(pod) else None


def pod_protection(pod: Mapping[str, Any]) -> str | None:
    """Why this pod keeps its node (an annotation), or None."""
    if not is_work(pod):
        return None
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    for key, keep in POD_PROTECTION.items():
        if str(annotations.get(key, "")).lower() == keep:
            return f"runs pod {meta.get('namespace', '')}/{meta.get('name', '')} annotated {key}={keep}"
    return None


# ---- nodes ------------------------------------------------------------------------------------------------------

def parse_time(text: str | None) -> float | None:
    """RFC 3339 to epoch seconds (None for nothing or garbage)."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cordon_mark(owner: str, now: float) -> str:
    """The value of our cordon annotation."""
    return f"{owner}@{format_time(now)}"


def node_protection(node: Mapping[str, Any]) -> str | None:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    for key, keep in NODE_PROTECTION.items():
        if str(annotations.get(key, "")).lower() == keep:
            return f"node annotated {key}={keep}"
    return None


def node_view(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
              patterns: Sequence[str] = DEFAULT_GPU_RESOURCES, dra: Dra | None = None) -> NodeView:
    """A node and the pods bound to it, as the API server sends them, turned into facts. The one place a node's
    GPUs and a pod's are counted: extended resources, and with ``dra`` read, the node's devices and the pods'
    claims (:mod:`autoscaler.cluster.dra`)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    name, pods = str(meta.get("name", "")), list(pods)
    condition: Mapping[str, Any] = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    ready = condition.get("status") == "True"
    mark = str((meta.get("annotations") or {}).get(CORDON_ANNOTATION) or "")
    owner, _, when = mark.rpartition("@")
    ours = parse_time(when) if mark else None
    protected = node_protection(node) or next((r for r in map(pod_protection, pods) if r), None)
    allocatable = status.get("allocatable") or {}
    free = {k: quantity(v) for k, v in allocatable.items()}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") not in _FINISHED:
            for resource, amount in requests_of(pod.get("spec") or {}).items():
                free[resource] = free.get(resource, Decimal(0)) - amount
    gpus = count_gpus(name, allocatable, [p for p in pods if is_work(p)], patterns, dra)
    free.update(gpus.free)
    unread = ""
    if gpus.unread and dra is not None:
        more = f" and {len(gpus.unread) - 1} more" if len(gpus.unread) > 1 else ""
        unread = (f"runs pod {gpus.unread[0]}{more} with resource claims (DRA not read ({dra.unseen}): claim not "
                  f"counted, so it may hold GPUs)")
    return NodeView(
        name=name, ready=ready, created=parse_time(meta.get("creationTimestamp")) or 0.0,
        ready_since=parse_time(condition.get("lastTransitionTime")) or 0.0,
        cordoned=bool(spec.get("unschedulable")), gpu_pods=gpus.pods, protected=protected,
        cordoned_by_us=ours if ours is not None else (0.0 if mark else None),
        provider_id=spec.get("providerID", "") or "",
        gpu_allocatable=gpus.allocatable,
        cordon_owner=owner if mark else "",
        pods=gpus.facts,
        labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
        taints=tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                     for t in spec.get("taints") or ()),
        free=tuple(sorted(free.items())),
        gpu_resources=tuple(sorted(k for k in free if k in gpus.free or matches(k, patterns) and k in allocatable)),
        gpu_used=gpus.used,
        claims_unread=unread,
        dra_unread=dra.unseen if dra is not None and dra.blind and gpus.allocatable <= 0 else "",
        booked=str((meta.get("annotations") or {}).get(BOOKED_ANNOTATION) or "")[:320],
    )


def with_gangs(views: Sequence[NodeView], gangs: Iterable[tuple[str, Collection[str]]]) -> list[NodeView]:
    """The pool's nodes, those that came for a waiting atomic scale-out (``gangs``: its id and the pool's node names
    before the ask) marked ``gang``: kept from scale-in until it settles (docs/gang.md)."""
    out = list(views)
    for gang, known in gangs:
        out = [replace(v, gang=gang) if v.name not in known and not v.gang else v for v in out]
    return out


# ---- victims ----------------------------------------------------------------------------------------------------

def going(view: NodeView) -> str | None:
    """Why the node is already on its way out (its removal asked of the cloud, or in repair: the repair removes
    it), None when it is not."""
    if view.cordon_owner.endswith(REMOVING):
        return "its removal was already asked of the cloud"
    if view.cordon_owner == REPAIR_OWNER:
        return "in repair: its repair removes it"
    return None


def why_kept(view: NodeView) -> str | None:
    """The one answer to "may this node go now, and why not": None when a scale-in could take it. What the
    decision reads (the scale-in leaves going nodes out, ``pick_victims`` keeps busy ones), and what the API, the
    status page and ``python -m autoscaler nodes`` show."""
    return going(view) or view.busy_reason()


def summary(kept: Sequence[tuple[str, str]]) -> str:
    """Kept nodes and why, for a reason: the first few named (an event's details list them all)."""
    shown = "; ".join(f"{n}: {r}" for n, r in kept[:SHOWN])
    more = len(kept) - SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def kept_reason(node: NodeView, why: str) -> str:
    return f"kept {node.name}: {why}"


def pick_victims(nodes: Sequence[NodeView], remove: int, alerted: Collection[str], victims: str,
                 floor: int) -> tuple[list[NodeView], list[tuple[NodeView, str]]]:
    """The nodes to remove, in order, and the nodes kept with an SRE-readable reason.

    Alert-named nodes first, then the newest. Only nodes without GPU work or protection go; at most ``remove``
    of them, and never so many that fewer than ``floor`` nodes are left. ``alerted`` takes only alert-named
    nodes (still idle and unprotected: only a forced manual removal takes a busy node).
    """
    if victims not in ("alerted", "idle"):
        raise ValueError(f"victims {victims!r}: the cloud picks, not the service")
    named = set(alerted)
    order = sorted(nodes, key=lambda n: (n.name not in named, -n.created, n.name))
    if victims == "alerted":
        order = [n for n in order if n.name in named]
    room = max(min(remove, len(nodes) - floor), 0)
    chosen: list[NodeView] = []
    kept: list[tuple[NodeView, str]] = []
    held = 0  # idle nodes the floor keeps
    for node in order:
        why = node.busy_reason()
        if why:
            kept.append((node, kept_reason(node, why)))
        elif len(chosen) < room:
            chosen.append(node)
        elif len(chosen) + held < remove:
            held += 1
            kept.append((node, kept_reason(node, f"the pool keeps at least {floor} nodes")))
    return chosen, kept
