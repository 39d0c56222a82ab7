"""The replay's cluster: the pool's named nodes, GPU work placed on them as kube-scheduler spreads it, and the work a
removal cuts.

The work model (see docs/replay.md, "Interrupted work"): a trace minute's demand ``d`` (nodes' worth of work) is
``round(d × gpus_per_node)`` pods of one GPU each. When demand rises, new pods arrive; when it falls, the pods that
arrived first finish first (a queue of jobs of similar length, first in, first done). A pod runs on a ready,
uncordoned node: each goes to the node with the most free GPUs (kube-scheduler's default LeastAllocated score;
ties to the older node, where the scheduler would pick at random), or with ``pack`` to the fullest node that
still fits it (the MostAllocated scoring strategy, for bin-packing). A pod that finds no free GPU waits, in arrival
order. A node removed with pods on it cuts them: the GPU time they had run is lost (``interrupted_node_minutes``)
and they wait to run again from the start.

``movable_share`` of the pods (spread evenly over arrivals) are inference replicas, owned by a ReplicaSet; the rest
are Jobs' pods. A replica evicted by a drain, or on a node that goes, waits and is placed again by the same
spreading; it loses no work (it serves requests, it computes nothing that is lost) and counts as an eviction.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_right, insort
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ContextManager, Mapping, Sequence

from autoscaler.cluster.nodes import ClusterCapabilities, GpuPod, NodeView, PoolRead
from autoscaler.cluster.pods import Budget, PodFacts

RESOURCE = "nvidia.com/gpu"
NAMESPACE = "replay"
DEFAULT_GPUS_PER_NODE = 8
POOL_LABEL = "gpu-autoscaler/replay-pool"  # the selector the replay gives a pool of a group (its nodes only)


@dataclass
class _Node:
    name: str
    created: float
    ready_at: float
    pool: str = ""  # the pool it belongs to, when the replay holds a group's pools
    cordon: tuple[str, float] | None = None  # (owner, time) of our cordon
    pods: dict[int, float] = field(default_factory=dict)  # pod serial -> when it started here
    view: tuple[tuple[object, ...], NodeView] | None = None  # the last view built and what it was built from


class ReplayCluster:
    """An in-memory :class:`autoscaler.cluster.nodes.Cluster` that follows the simulated provider's node names
    (the core only: it declares no optional capability)."""

    capabilities = ClusterCapabilities()

    def __init__(self, names: Sequence[str], gpus_per_node: int, provision_seconds: float, start: float,
                 pack: bool = False, movable_share: float = 0.0, owners: Mapping[str, str] | None = None,
                 provision_by_pool: Mapping[str, float] | None = None,
                 stopped_by_pool: Mapping[str, tuple[int, float]] | None = None) -> None:
        self.gpus_per_node = gpus_per_node
        self.pack = pack
        self.movable_share = movable_share
        self.provision_seconds = provision_seconds
        self.provision_by_pool = dict(provision_by_pool or {})  # a group's pools may boot at different speeds
        # pools that keep removed nodes stopped: (how many at most, a stopped node's restart); how many each has now
        self.stopped_by_pool = dict(stopped_by_pool or {})
        self.stopped: dict[str, int] = dict.fromkeys(self.stopped_by_pool, 0)
        self.restarts = 0  # nodes that came back from stopped (their boot was the restart)
        self.now = start
        self._nodes: dict[str, _Node] = {
            name: _Node(name, start - len(names) + i, start, (owners or {}).get(name, ""))
            for i, name in enumerate(names)}
        self._arrived: deque[int] = deque()  # pods in the system (running or waiting), by arrival
        self._where: dict[int, str | None] = {}  # pod -> its node, None while waiting
        self._serial = 0
        self._pods: dict[int, tuple[GpuPod, PodFacts]] = {}  # each pod's listed form, built once (see _pod)
        self.waiting = 0  # pods waiting for a GPU (the replay calls ``place`` only while there are some)
        self._queue: list[int] = []  # the waiting pods' serials, a heap (arrival order); finished ones skipped lazily
        self.interrupted_node_minutes = 0.0
        self.interrupted_pods = 0
        self.evictions = 0  # replicas that had to start again elsewhere (a drain evicted them, or their node went)
        # What makes a replay minute cheap (the tuner replays hundreds of weeks): the nodes' boot ends, sorted, all
        # and by pool, kept as nodes come and go, so counting the ready nodes is a search; and ``place`` skipped while
        # nothing it reads has changed (``_changes``) and no node has finished booting since it last left pods waiting.
        self._ready_times: list[float] = sorted(n.ready_at for n in self._nodes.values())
        self._pool_times: dict[str, list[float]] = {}
        for node in self._nodes.values():
            insort(self._pool_times.setdefault(node.pool, []), node.ready_at)
        self._changes = 0  # bumped by whatever may let a waiting pod run: pods or nodes going, an uncordon
        self._stuck: tuple[int, float] | None = None  # (_changes, next boot's end) when place last left pods waiting

    # -- what the replay drives -----------------------------------------------------------------------------------
    def follow(self, names: Sequence[str], now: float, owners: Mapping[str, str] | None = None) -> None:
        """Match the providers' nodes (``owners``: each node's pool, for a group): new names start provisioning,
        nodes gone take their pods with them."""
        self.now = now
        current = set(names)
        for name in [n for n in self._nodes if n not in current]:
            pool = self._nodes[name].pool
            if pool in self.stopped_by_pool:  # stopped, not deleted, up to the pool's keep
                self.stopped[pool] = min(self.stopped[pool] + 1, self.stopped_by_pool[pool][0])
            self._remove(name, now)
        for i, name in enumerate(n for n in names if n not in self._nodes):
            pool = (owners or {}).get(name, "")
            boot = self.provision_by_pool.get(pool, self.provision_seconds)
            if self.stopped.get(pool):  # a stopped node starts again before a new one is made
                self.stopped[pool] -= 1
                self.restarts += 1
                boot = self.stopped_by_pool[pool][1]
            self._add(_Node(name, now + i * 1e-3, now + boot, pool))
        self.place(now)

    def set_demand(self, demand: float, now: float) -> None:
        """The minute's demand in nodes of work: pods arrive, or the first arrived finish."""
        self.now = now
        want = max(round(demand * self.gpus_per_node), 0)
        if want != len(self._arrived):
            self._changes += 1
        if want > len(self._arrived):  # new pods, in one batch: the newest serials, so the queue is still a heap
            new = range(self._serial + 1, self._serial + 1 + want - len(self._arrived))
            self._serial = new[-1]
            self._arrived.extend(new)
            self._where.update(dict.fromkeys(new))
            self.waiting += len(new)
            self._queue.extend(new)
        while len(self._arrived) > want:
            pod = self._arrived.popleft()
            self._pods.pop(pod, None)
            node = self._where.pop(pod)
            if node is not None:
                del self._nodes[node].pods[pod]
            else:
                self.waiting -= 1
        self.place(now)

    def place(self, now: float) -> None:
        """Bind waiting pods, first arrived first, each to the schedulable node with the most free GPUs (``pack``:
        the fewest that still fit it)."""
        self.now = now
        if not self.waiting:
            self._queue.clear()  # only pods that finished while they waited are left in it
            return
        if self._stuck is not None and self._stuck[0] == self._changes and now < self._stuck[1]:
            return
        # The schedulable nodes with a free GPU, a heap by score then age (the first of equals is the oldest node,
        # the earliest in ``_nodes``): the most free GPUs first, or with ``pack`` the fewest.
        sign = 1 if self.pack else -1
        fits = [(sign * (self.gpus_per_node - len(n.pods)), age, n.name)
                for age, n in enumerate(self._nodes.values())
                if n.ready_at <= now and n.cordon is None and len(n.pods) < self.gpus_per_node]
        heapq.heapify(fits)
        queue, where, nodes = self._queue, self._where, self._nodes
        while queue:
            pod = queue[0]
            if where.get(pod, "") is not None:  # finished while it waited (its arrival is gone): skip it
                heapq.heappop(queue)
                continue
            if not fits:
                booting = [n.ready_at for n in nodes.values() if n.ready_at > now]
                self._stuck = (self._changes, min(booting, default=math.inf))
                return
            heapq.heappop(queue)
            score, age, best = fits[0]
            left = sign * score - 1  # its free GPUs once this pod runs there
            if left > 0:
                heapq.heapreplace(fits, (sign * left, age, best))
            else:
                heapq.heappop(fits)
            self.waiting -= 1
            where[pod] = best
            nodes[best].pods[pod] = now

    def ready(self, now: float) -> int:
        return bisect_right(self._ready_times, now)

    def ready_by_pool(self, now: float) -> dict[str, int]:
        """Ready nodes of each pool (a group's replay); a pool without one is left out."""
        out: dict[str, int] = {}
        for pool, times in self._pool_times.items():
            if count := bisect_right(times, now):
                out[pool] = count
        return out

    @property
    def requested(self) -> int:
        return len(self._nodes)

    def movable(self, pod: int) -> bool:
        """Whether pod ``pod`` (its arrival serial) is a replica: ``movable_share`` of the pods, spread evenly."""
        share = self.movable_share
        return math.floor(pod * share + 1e-9) > math.floor((pod - 1) * share + 1e-9)

    def _name(self, pod: int) -> str:
        return f"infer-{pod}" if self.movable(pod) else f"work-{pod}"

    def usage(self, now: float) -> tuple[int, int, int]:
        """(nodes, Ready schedulable nodes, GPUs requested on them): what the headroom reads of the cluster, cheap
        to compare between two moments."""
        ready = [n for n in self._nodes.values() if n.ready_at <= now and n.cordon is None]
        return len(self._nodes), len(ready), sum(len(n.pods) for n in ready)

    def _cut(self, pod: int, node: _Node, now: float) -> None:
        """The pod stops on ``node`` and waits to run again: a Job's pod loses the GPU time it ran there, a
        replica loses nothing and counts as an eviction."""
        started = node.pods.pop(pod)
        if self.movable(pod):
            self.evictions += 1
        else:
            self.interrupted_node_minutes += (now - started) / 60.0 / self.gpus_per_node
            self.interrupted_pods += 1
        self._where[pod] = None
        self.waiting += 1
        heapq.heappush(self._queue, pod)
        self._changes += 1

    def _add(self, node: _Node) -> None:
        self._nodes[node.name] = node
        insort(self._ready_times, node.ready_at)
        insort(self._pool_times.setdefault(node.pool, []), node.ready_at)
        self._changes += 1

    def _remove(self, name: str, now: float) -> None:
        node = self._nodes.pop(name)
        self._ready_times.remove(node.ready_at)
        times = self._pool_times[node.pool]
        times.remove(node.ready_at)
        if not times:
            del self._pool_times[node.pool]
        self._changes += 1
        for pod in list(node.pods):
            self._cut(pod, node, now)

    # -- the Cluster protocol (what the engine's node-aware scale-in calls) ---------------------------------------
    def nodes(self, selector: Mapping[str, str]) -> list[NodeView]:
        """The pool's nodes: all of them for one pool; a group's pool selects its own by ``POOL_LABEL``."""
        pool = selector.get(POOL_LABEL)
        return [self._view(n) for n in self._nodes.values() if not pool or not n.pool or n.pool == pool]

    def node(self, name: str) -> NodeView | None:
        found = self._nodes.get(name)
        return None if found is None else self._view(found)

    def cordon(self, name: str, owner: str, now: float) -> None:
        if name in self._nodes:
            self._nodes[name].cordon = (owner, now)

    def uncordon(self, name: str) -> None:
        if name in self._nodes:
            self._nodes[name].cordon = None
            self._changes += 1
            self.place(self.now)

    def evict(self, namespace: str, pod: str) -> str | None:
        """Evictions are always accepted (no PodDisruptionBudgets here); the pod's work so far is lost."""
        serial = int(pod.rpartition("-")[2]) if namespace == NAMESPACE and pod.startswith(("work-", "infer-")) else 0
        node = self._where.get(serial)
        if node is not None:
            self._cut(serial, self._nodes[node], self.now)
        return None

    def budgets(self) -> list[Budget]:
        raise NotImplementedError("not declared (capabilities.lists_budgets)")

    def read_pool(self, pool: str, selector: Mapping[str, str], pending: bool = True) -> PoolRead:
        raise NotImplementedError("not declared (capabilities.reads_pools)")

    def once(self) -> ContextManager[None]:
        raise NotImplementedError("not declared (capabilities.reads_pools)")

    def marked(self, selector: Mapping[str, str]) -> list[NodeView]:
        raise NotImplementedError("not declared (capabilities.lists_marked)")

    def _view(self, node: _Node) -> NodeView:
        """The node as the engine reads it; built again only when its readiness, cordon or pods changed (the
        headroom's check lists the pool every reconcile tick: most nodes are as they were)."""
        ready = node.ready_at <= self.now
        key = (ready, node.cordon, tuple(node.pods))
        if node.view is not None and node.view[0] == key:
            return node.view[1]
        view = self._build(node, ready)
        node.view = (key, view)
        return view

    def _pod(self, serial: int) -> tuple[GpuPod, PodFacts]:
        """One pod as the node views list it (the same frozen objects each time: a pod does not change)."""
        found = self._pods.get(serial)
        if found is None:
            name = self._name(serial)
            found = (GpuPod(NAMESPACE, name, RESOURCE, 1),
                     PodFacts(NAMESPACE, name, "ReplicaSet" if self.movable(serial) else "Job",
                              ((RESOURCE, Decimal(1)),), gpus=1))
            self._pods[serial] = found
        return found

    def _build(self, node: _Node, ready: bool) -> NodeView:
        built = [self._pod(serial) for serial in node.pods]
        pods = tuple(pod for pod, _ in built)
        facts = tuple(fact for _, fact in built)
        allocatable = self.gpus_per_node if ready else 0
        return NodeView(name=node.name, ready=ready, created=node.created, cordoned=node.cordon is not None,
                        gpu_pods=pods, protected=None,
                        cordoned_by_us=None if node.cordon is None else node.cordon[1], provider_id="",
                        gpu_allocatable=allocatable,
                        cordon_owner="" if node.cordon is None else node.cordon[0], pods=facts,
                        free=((RESOURCE, Decimal(allocatable - len(node.pods))),), gpu_resources=(RESOURCE,))
