"""What counts as GPU work, what protects a node, and which nodes a scale-in picks (pure, case by case)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autoscaler.cluster.nodes import (CORDON_ANNOTATION, GpuPod, NodeView, cordon_mark, gpu_pod, node_view,
                                      pick_victims, pod_protection)

GPU_PATTERNS = ("nvidia.com/gpu", "nvidia.com/mig-*")


def pod(name: str = "train-7", *, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        init: dict[str, str] | None = None, phase: str = "Running", owner: str | None = "Job",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    containers = [{"name": "main", "resources": {"requests": requests or {}, "limits": limits or {}}}]
    spec: dict[str, Any] = {"containers": containers, "nodeName": "n1"}
    if init:
        spec["initContainers"] = [{"name": "warm", "resources": {"limits": init}}]
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


GPU_CASES = [
    pytest.param(pod(limits={"nvidia.com/gpu": "8"}), GpuPod("ml", "train-7", "nvidia.com/gpu", 8),
                 id="limits-only-gpu-pod"),
    pytest.param(pod(requests={"nvidia.com/gpu": "2"}, limits={"nvidia.com/gpu": "2"}),
                 GpuPod("ml", "train-7", "nvidia.com/gpu", 2), id="request-and-limit"),
    pytest.param(pod(limits={"nvidia.com/mig-1g.10gb": "1"}), GpuPod("ml", "train-7", "nvidia.com/mig-1g.10gb", 1),
                 id="mig-resource"),
    pytest.param(pod(requests={"cpu": "4"}, init={"nvidia.com/gpu": "1"}), GpuPod("ml", "train-7", "nvidia.com/gpu", 1),
                 id="init-container-only"),
    pytest.param(pod(limits={"nvidia.com/gpu": "1"}, owner="DaemonSet"), None, id="daemonset-pod"),
    pytest.param(pod(limits={"nvidia.com/gpu": "1"}, phase="Succeeded"), None, id="finished-pod"),
    pytest.param(pod(limits={"nvidia.com/gpu": "1"}, phase="Failed"), None, id="failed-pod"),
    pytest.param(pod(limits={"nvidia.com/gpu": "1"}, phase="Pending"), GpuPod("ml", "train-7", "nvidia.com/gpu", 1),
                 id="pending-pod-bound-to-node"),
    pytest.param(pod(requests={"cpu": "4", "memory": "8Gi"}), None, id="cpu-only-pod"),
    pytest.param(pod(limits={"nvidia.com/gpu": "1"}, owner=None,
                     annotations={"kubernetes.io/config.mirror": "abc"}), None, id="mirror-pod"),
    pytest.param(pod(limits={"amd.com/gpu": "1"}), None, id="resource-not-in-patterns"),
    pytest.param(pod(limits={"nvidia.com/gpu": "0"}), None, id="zero-gpus"),
]


@pytest.mark.parametrize("raw, expected", GPU_CASES)
def test_gpu_work(raw: dict[str, Any], expected: GpuPod | None) -> None:
    assert gpu_pod(raw, GPU_PATTERNS) == expected


def node(name: str = "aks-gpunp-1-vmss000003", annotations: dict[str, str] | None = None,
         created: str = "2026-11-20T10:00:00Z", unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable, "providerID": "azure:///vm/3"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}}


PROTECTION_CASES = [
    pytest.param(node(annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}), [],
                 "node annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true",
                 id="node-scale-down-disabled"),
    pytest.param(node(annotations={"karpenter.sh/do-not-disrupt": "true"}), [],
                 "node annotated karpenter.sh/do-not-disrupt=true", id="node-do-not-disrupt"),
    pytest.param(node(), [pod("web", requests={"cpu": "1"}, annotations={"karpenter.sh/do-not-disrupt": "true"})],
                 "runs pod ml/web annotated karpenter.sh/do-not-disrupt=true", id="pod-do-not-disrupt"),
    pytest.param(node(), [pod("db", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})],
                 "runs pod ml/db annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false",
                 id="pod-safe-to-evict-false"),
    pytest.param(node(), [pod("db", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"})], None,
                 id="pod-safe-to-evict-true-does-not-protect"),
    pytest.param(node(annotations={"karpenter.sh/do-not-disrupt": "false"}), [], None, id="node-annotation-false"),
    pytest.param(node(), [pod("db", phase="Succeeded", annotations={"karpenter.sh/do-not-disrupt": "true"})], None,
                 id="finished-pod-protects-nothing"),
    pytest.param(node(), [pod("dcgm", owner="DaemonSet", annotations={"karpenter.sh/do-not-disrupt": "true"})], None,
                 id="daemonset-pod-protects-nothing"),
    pytest.param(node(), [], None, id="plain-node"),
]


@pytest.mark.parametrize("raw_node, pods, why", PROTECTION_CASES)
def test_protection(raw_node: dict[str, Any], pods: list[dict[str, Any]], why: str | None) -> None:
    assert node_view(raw_node, pods, GPU_PATTERNS).protected == why


def test_pod_protection_direct() -> None:
    assert pod_protection(pod(annotations={"karpenter.sh/do-not-disrupt": "TRUE"})) is not None


def test_node_view_facts() -> None:
    raw = node(annotations={CORDON_ANNOTATION: cordon_mark("worker-1", 1_000_000.0)}, unschedulable=True)
    view = node_view(raw, [pod(limits={"nvidia.com/gpu": "8"}), pod("cpu", requests={"cpu": "1"})], GPU_PATTERNS)
    assert view.name == "aks-gpunp-1-vmss000003" and view.ready and view.cordoned
    assert view.cordoned_by_us == 1_000_000.0
    assert view.gpu_allocatable == 8 and view.provider_id == "azure:///vm/3"
    assert view.gpu_pods == (GpuPod("ml", "train-7", "nvidia.com/gpu", 8),)
    assert view.busy_reason() == "runs GPU pod ml/train-7 (nvidia.com/gpu 8)"
    assert view.created == 1_795_168_800.0
    assert node_view(node(), [], GPU_PATTERNS).cordoned_by_us is None


def nv(name: str, created: float, gpu: int = 0, protected: str | None = None) -> NodeView:
    pods = (GpuPod("ml", f"job-{name}", "nvidia.com/gpu", gpu),) if gpu else ()
    return NodeView(name=name, ready=True, created=created, cordoned=False, gpu_pods=pods, protected=protected,
                    cordoned_by_us=None, provider_id="", gpu_allocatable=8)


A, B, C, D = nv("a", 100), nv("b", 200), nv("c", 300), nv("d", 400)
BUSY = nv("busy", 500, gpu=8)
PROT = nv("prot", 600, protected="node annotated karpenter.sh/do-not-disrupt=true")

PICK_CASES = [
    pytest.param([A, B, C, D], 1, (), "idle", 0, ["d"], [], id="newest-first"),
    pytest.param([A, B, C, D], 2, ("a",), "idle", 0, ["a", "d"], [], id="alerted-first-then-newest"),
    pytest.param([A, B, BUSY], 1, (), "idle", 0, ["b"], ["kept busy: runs GPU pod ml/job-busy (nvidia.com/gpu 8)"],
                 id="busy-node-kept"),
    pytest.param([A, PROT], 2, (), "idle", 0, ["a"],
                 ["kept prot: node annotated karpenter.sh/do-not-disrupt=true"], id="protected-node-kept"),
    pytest.param([BUSY, PROT], 1, (), "idle", 0, [],
                 ["kept prot: node annotated karpenter.sh/do-not-disrupt=true",
                  "kept busy: runs GPU pod ml/job-busy (nvidia.com/gpu 8)"], id="none-removable"),
    pytest.param([A, B, C], 3, (), "idle", 2, ["c"],
                 ["kept b: the pool keeps at least 2 nodes", "kept a: the pool keeps at least 2 nodes"],
                 id="never-below-floor"),
    pytest.param([A, B, C], 1, (), "idle", 3, [], ["kept c: the pool keeps at least 3 nodes"], id="at-floor"),
    pytest.param([A, B, C, D], 2, ("b",), "alerted", 0, ["b"], [], id="alerted-only-named"),
    pytest.param([A, BUSY], 1, ("busy",), "alerted", 0, [],
                 ["kept busy: runs GPU pod ml/job-busy (nvidia.com/gpu 8)"], id="alerted-but-busy"),
    pytest.param([A, B], 1, ("zz",), "alerted", 0, [], [], id="alerted-name-not-in-pool"),
    pytest.param([A, B, C, D], 0, (), "idle", 0, [], [], id="nothing-to-remove"),
]


@pytest.mark.parametrize("nodes, remove, alerted, victims, floor, chosen, kept", PICK_CASES)
def test_pick_victims(nodes: list[NodeView], remove: int, alerted: tuple[str, ...], victims: str, floor: int,
                      chosen: list[str], kept: list[str]) -> None:
    got, got_kept = pick_victims(nodes, remove, alerted, victims, floor)
    assert [n.name for n in got] == chosen
    assert [why for _, why in got_kept] == kept


def test_more_gpu_pods_in_reason() -> None:
    many = replace(BUSY, gpu_pods=BUSY.gpu_pods * 3)
    assert many.busy_reason() == "runs GPU pod ml/job-busy (nvidia.com/gpu 8) and 2 more GPU pods"


def test_cloud_victims_are_not_picked_here() -> None:
    with pytest.raises(ValueError):
        pick_victims([A], 1, (), "cloud", 0)
