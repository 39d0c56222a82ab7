"""A pod's GPUs and a node's, however Kubernetes allocates them (pure): the one count every reader uses.

A device plugin's extended resources (``kubernetes.gpu_resources``: the node's allocatable, the pods' requests or
limits) and Dynamic Resource Allocation (``kubernetes.gpu_device_classes``: the node's devices in ResourceSlices,
the pods' claims; :mod:`autoscaler.cluster.dra`). :func:`count_gpus` is what :func:`autoscaler.cluster.nodes.node_view`
asks: the node's GPUs (extended allocatable, or where it has none, its DRA devices), the GPUs its pods hold (a claim
several pods share counts once), what is free per DRA driver, the GPU pods, and each pod's facts for the fit (a DRA
pod asks for its claims' devices under the driver's name, e.g. ``gpu.nvidia.com``).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Mapping, Sequence

from autoscaler.cluster.dra import Dra, asks_through_claims, pod_gpu_claims
from autoscaler.cluster.pods import PodFacts, pod_facts


@dataclass(frozen=True)
class GpuPod:
    """A pod that counts as GPU work on a node."""

    namespace: str
    name: str
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", or a DRA class: "gpu.nvidia.com"
    count: int

    def describe(self) -> str:
        return f"{self.namespace}/{self.name} ({self.resource} {self.count})"


@dataclass(frozen=True)
class NodeGpus:
    """What :func:`count_gpus` found on one node."""

    allocatable: int
    used: int
    free: dict[str, Decimal]  # DRA driver -> devices no claim holds (empty without DRA)
    pods: tuple[GpuPod, ...]
    facts: tuple[PodFacts, ...]
    unread: tuple[str, ...] = ()  # pods (namespace/name) with claims DRA could not be read for (Dra.blind)


def whole(value: Any) -> int:
    """An extended resource's quantity as a whole number (GPUs are never fractional; "2" -> 2)."""
    try:
        return max(int(float(str(value))), 0)
    except ValueError:
        return 1


def matches(resource: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, p) for p in patterns)


def _container_gpus(container: Mapping[str, Any], patterns: Sequence[str]) -> dict[str, int]:
    """GPU resources one container asks for: its request, or its limit when it sets only a limit."""
    res = container.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    out: dict[str, int] = {}
    for name in {*requests, *limits}:
        if matches(name, patterns):
            count = whole(requests[name] if name in requests else limits[name])
            if count:
                out[name] = count
    return out


def extended_gpus(spec: Mapping[str, Any], patterns: Sequence[str]) -> dict[str, int]:
    """The GPU extended resources a pod spec asks for: the containers' sum, or the largest init container's."""
    totals: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for name, n in _container_gpus(c, patterns).items():
            totals[name] = totals.get(name, 0) + n
    for c in spec.get("initContainers") or ():
        for name, n in _container_gpus(c, patterns).items():
            totals[name] = max(totals.get(name, 0), n)
    return totals


def extended_pod(pod: Mapping[str, Any], patterns: Sequence[str]) -> GpuPod | None:
    """The pod as GPU work by its extended resources (its largest one), or None."""
    totals = extended_gpus(pod.get("spec") or {}, patterns)
    if not totals:
        return None
    resource = max(sorted(totals), key=lambda r: totals[r])
    meta = pod.get("metadata") or {}
    return GpuPod(meta.get("namespace", ""), meta.get("name", ""), resource, totals[resource])


def count_gpus(node: str, allocatable: Mapping[str, Any], work: Sequence[Mapping[str, Any]],
               patterns: Sequence[str], dra: Dra | None) -> NodeGpus:
    """The node's GPUs and its pods' (``work``: the pods that would stop if it went)."""
    drivers = set(dra.drivers.values()) if dra is not None and dra.read else set()
    free = {d: Decimal(n) for d, n in dra.node_free(node).items()} if dra is not None and drivers else {}

    def is_gpu(resource: str) -> bool:
        return resource in drivers or matches(resource, patterns)
    ext = sum(whole(v) for k, v in allocatable.items() if matches(k, patterns))
    pods: list[GpuPod] = []
    facts: list[PodFacts] = []
    seen: set[tuple[str, str]] = set()  # a claim several pods share: its devices go with the first the fit moves
    unread: list[str] = []
    for pod in work:
        claims = pod_gpu_claims(pod, dra)
        one = pod_facts(pod, is_gpu)
        extra: dict[str, int] = {}
        for key, claim in claims:
            if key not in seen:
                seen.add(key)
                extra[claim.driver] = extra.get(claim.driver, 0) + claim.gpus
        if extra:
            asked = dict(one.requests)
            asked.update({d: asked.get(d, Decimal(0)) + n for d, n in extra.items()})
            one = replace(one, requests=tuple(sorted(asked.items())), gpus=one.gpus + sum(extra.values()))
        facts.append(one)
        gpu = extended_pod(pod, patterns)
        if gpu is None and claims:
            meta = pod.get("metadata") or {}
            gpu = GpuPod(meta.get("namespace", ""), meta.get("name", ""), claims[0][1].gpu_class,
                         sum(c.gpus for _, c in claims))
        if gpu is not None:
            pods.append(gpu)
        elif dra is not None and dra.blind and asks_through_claims(pod):  # may hold GPUs this read cannot see
            meta = pod.get("metadata") or {}
            unread.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    on_dra = ext <= 0 and dra is not None and dra.node_gpus(node) > 0
    if on_dra and dra is not None:  # no device plugin here: an extended request is served by a claim it holds
        return NodeGpus(dra.node_gpus(node), dra.node_taken(node), free, tuple(pods), tuple(facts))
    return NodeGpus(ext, sum(p.count for p in pods if matches(p.resource, patterns)), free, tuple(pods), tuple(facts),
                    tuple(unread))


#: The pod label that names the pool an unscheduled pod waits for (as the shipped demand rules read it).
POOL_LABEL = "gpu-autoscaler/pool"


def not_extended(node: Mapping[str, Any], patterns: Sequence[str]) -> bool:
    """Whether the node has no device-plugin GPU allocatable (its GPUs, if any, come through DRA)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return sum(whole(v) for k, v in allocatable.items() if matches(k, patterns)) <= 0


def waits_for(pod: Mapping[str, Any], pool: str, selector: Mapping[str, str]) -> bool:
    """Whether an unscheduled pod waits for this pool: its label ``gpu-autoscaler/pool`` names the pool, or its
    ``nodeSelector`` asks for every label of the pool's node selector."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    named = (meta.get("labels") or {}).get(POOL_LABEL)
    if named:
        return bool(pool) and named == pool
    wants = spec.get("nodeSelector") or {}
    return bool(selector) and all(k in wants and (not v or wants[k] == v) for k, v in selector.items())


def pending_gpus(waiting: Sequence[Mapping[str, Any]], patterns: Sequence[str], dra: Dra | None) -> int:
    """The GPUs unscheduled pods wait for: their GPU extended requests and their claims not allocated yet (a claim
    several pods share counts once)."""
    total, seen = 0, set()
    for pod in waiting:
        total += sum(extended_gpus(pod.get("spec") or {}, patterns).values())
        for key, claim in pod_gpu_claims(pod, dra):
            if not claim.allocated and key not in seen:
                seen.add(key)
                total += claim.gpus
    return total
