"""What may move off a node, whether it fits on the nodes that stay, and which node ``victims: movable`` drains
(pure, case by case, from the API server's own JSON shapes)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from autoscaler.cluster.fit import Room, Taint, place_all
from autoscaler.cluster.movable import ONE_PER_DECISION, pick_movable
from autoscaler.cluster.nodes import NodeView, node_view
from autoscaler.cluster.pods import Budget, budget_of, move_blocker, pod_facts, quantity

GPU = ("nvidia.com/gpu", "nvidia.com/mig-*")


def is_gpu(resource: str) -> bool:
    return resource.startswith("nvidia.com/")


def raw_pod(name: str = "web-1", *, namespace: str = "ml", owner: str | None = "ReplicaSet", gpus: int = 1,
            cpu: str = "1", memory: str = "1Gi", annotations: dict[str, str] | None = None,
            volumes: list[dict[str, Any]] | None = None, node_selector: dict[str, str] | None = None,
            affinity: dict[str, Any] | None = None, tolerations: list[dict[str, str]] | None = None,
            labels: dict[str, str] | None = None, node: str = "n1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": annotations or {},
                            "labels": labels or {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec: dict[str, Any] = {"nodeName": node, "containers": [
        {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}}]}
    for key, value in (("volumes", volumes), ("nodeSelector", node_selector), ("affinity", affinity),
                       ("tolerations", tolerations)):
        if value is not None:
            spec[key] = value
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def facts(**kw: Any) -> Any:
    return pod_facts(raw_pod(**kw), is_gpu)


KUBE_SYSTEM_PDB = Budget("kube-system", "dns", (("app", "web"),), (), 1)
CLOSED_PDB = Budget("ml", "web", (("app", "web"),), (), 0)

MOVE_CASES = [
    pytest.param(facts(owner="ReplicaSet"), None, None, id="owner-replicaset-moves"),
    pytest.param(facts(owner="StatefulSet"), None, None, id="owner-statefulset-moves"),
    pytest.param(facts(owner="Job"), None, "is owned by a Job", id="owner-job-stays"),
    pytest.param(facts(owner="RayCluster"), None, "is owned by a RayCluster", id="owner-other-kind-stays"),
    pytest.param(facts(owner=None), None, "has no controller", id="bare-pod-stays"),
    pytest.param(facts(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}), None,
                 "annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false", id="annotation-safe-to-evict-false"),
    pytest.param(facts(annotations={"karpenter.sh/do-not-disrupt": "true"}), None,
                 "annotated karpenter.sh/do-not-disrupt=true", id="annotation-do-not-disrupt"),
    pytest.param(facts(volumes=[{"name": "scratch", "emptyDir": {}}]), None, "emptyDir volume scratch",
                 id="local-storage-emptydir-stays"),
    pytest.param(facts(volumes=[{"name": "models", "hostPath": {"path": "/data"}}]), None, "hostPath volume models",
                 id="local-storage-hostpath-stays"),
    pytest.param(facts(volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}]), None, None,
                 id="emptydir-in-memory-moves"),
    pytest.param(facts(volumes=[{"name": "cfg", "configMap": {"name": "c"}}]), None, None, id="configmap-volume-moves"),
    pytest.param(facts(volumes=[{"name": "scratch", "emptyDir": {}}],
                       annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}), None, None,
                 id="local-storage-marked-safe-to-evict-moves"),
    pytest.param(facts(namespace="kube-system"), [], "in kube-system without a PodDisruptionBudget",
                 id="kube-system-without-pdb-stays"),
    pytest.param(facts(namespace="kube-system"), [KUBE_SYSTEM_PDB], None, id="kube-system-with-pdb-moves"),
    pytest.param(facts(namespace="kube-system"), None, "in kube-system without", id="kube-system-budgets-unread"),
    pytest.param(facts(), [CLOSED_PDB], "PodDisruptionBudget ml/web allows no disruption now",
                 id="budget-allows-no-disruption"),
    pytest.param(facts(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}),
                 None, "pod (anti-)affinity", id="required-pod-anti-affinity-stays"),
]


@pytest.mark.parametrize("pod, budgets, blocker", MOVE_CASES)
def test_what_may_move(pod: Any, budgets: list[Budget] | None, blocker: str | None) -> None:
    why = move_blocker(pod, budgets=budgets)
    assert (why is None) if blocker is None else (why is not None and blocker in why), why


def test_movable_owners_is_a_list_the_config_sets() -> None:
    assert move_blocker(facts(owner="RayCluster"), owners=("RayCluster",)) is None
    assert "is owned by a ReplicaSet" in str(move_blocker(facts(owner="ReplicaSet"), owners=("StatefulSet",)))


def test_quantities_and_budget_parsing() -> None:
    assert [quantity(q) for q in ("500m", "16Gi", "1e3", "2", "1.5k", "bad")] == [
        Decimal("0.5"), Decimal(16 * 2**30), Decimal(1000), Decimal(2), Decimal(1500), Decimal(0)]
    raw = {"metadata": {"namespace": "ml", "name": "b"}, "status": {"disruptionsAllowed": 0},
           "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}}
    budget = budget_of(raw)
    assert budget.covers(facts()) and not budget.covers(facts(labels={"app": "db"}))
    assert not budget.covers(facts(namespace="other"))


def room(name: str = "n2", *, gpus: int = 8, cpu: str = "96", memory: str = "512Gi",
         labels: dict[str, str] | None = None, taints: list[Taint] | None = None) -> Room:
    free = {"nvidia.com/gpu": Decimal(gpus), "cpu": quantity(cpu), "memory": quantity(memory)}
    return Room(name, labels or {"pool": "gpu"}, taints or [], free, frozenset({"nvidia.com/gpu"}))


GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
FIT_CASES = [
    pytest.param([facts(gpus=2)], [room(gpus=2)], None, id="fit-by-gpu"),
    pytest.param([facts(gpus=2)], [room(gpus=1)], "needs nvidia.com/gpu 2, 1 free", id="no-fit-by-gpu"),
    pytest.param([facts(gpus=1), facts(name="web-2", gpus=1)], [room(gpus=1)], "pod ml/web-", id="gpu-spent-by-first"),
    pytest.param([facts(gpus=1), facts(name="web-2", gpus=1)], [room(gpus=1), room("n3", gpus=1)], None,
                 id="spread-over-two-nodes"),
    pytest.param([facts(cpu="8")], [room(cpu="4")], "needs cpu 8, 4 free", id="no-fit-by-cpu"),
    pytest.param([facts(cpu="500m")], [room(cpu="1")], None, id="fit-by-millicores"),
    pytest.param([facts(memory="64Gi")], [room(memory="32Gi")], "needs memory 64.0Gi", id="no-fit-by-memory"),
    pytest.param([facts(node_selector={"zone": "a"})], [room(labels={"zone": "b"})],
                 "nodeSelector zone=a does not match", id="no-fit-by-selector"),
    pytest.param([facts(node_selector={"zone": "a"})], [room(labels={"zone": "a"})], None, id="fit-by-selector"),
    pytest.param([facts(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}}})],
        [room(labels={"gpu": "h100"})], "required node affinity does not match", id="no-fit-by-node-affinity"),
    pytest.param([facts(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
                              {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}})],
        [room(labels={"gpu": "h100"})], None, id="fit-by-second-affinity-term"),
    pytest.param([facts()], [room(taints=[GPU_TAINT])], "taint nvidia.com/gpu=present:NoSchedule not tolerated",
                 id="no-fit-by-taint"),
    pytest.param([facts(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])],
                 [room(taints=[GPU_TAINT])], None, id="fit-by-toleration"),
    pytest.param([facts()], [room(taints=[Taint("x", "y", "PreferNoSchedule")])], None,
                 id="prefer-no-schedule-does-not-block"),
    pytest.param([facts()], [], "has no other node", id="no-other-node"),
]


@pytest.mark.parametrize("pods, rooms, problem", FIT_CASES)
def test_will_it_fit(pods: list[Any], rooms: list[Room], problem: str | None) -> None:
    why = place_all(pods, rooms)
    assert (why is None) if problem is None else (why is not None and problem in why), why


def raw_node(name: str, created: str, *, gpus: int = 8, unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"pool": "gpu"}, "creationTimestamp": created},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "512Gi"}}}


def view(name: str, day: int, pods: list[dict[str, Any]], **kw: Any) -> NodeView:
    return node_view(raw_node(name, f"2026-11-{day:02d}T00:00:00Z", **kw), pods, GPU)


def test_node_view_free_is_allocatable_minus_every_pods_requests() -> None:
    ds = raw_pod("dcgm", owner="DaemonSet", gpus=0, cpu="2")
    node = view("a", 1, [raw_pod(gpus=3), ds])
    free = dict(node.free)
    assert free["nvidia.com/gpu"] == 5 and free["cpu"] == 93  # the DaemonSet's request counts, it is not work
    assert [p.key for p in node.pods] == ["ml/web-1"] and node.gpu_resources == ("nvidia.com/gpu",)


def pick_case(nodes: list[NodeView], remove: int = 1, floor: int = 0) -> tuple[list[str], str | None, list[str]]:
    got = pick_movable(nodes, remove, (), floor)
    return [n.name for n in got.idle], got.drain.name if got.drain else None, [why for _, why in got.kept]


def test_idle_nodes_go_before_a_busy_one() -> None:
    nodes = [view("a", 1, [raw_pod(node="a")]), view("b", 2, [])]
    assert pick_case(nodes) == (["b"], None, ["kept a: runs GPU pod ml/web-1 (nvidia.com/gpu 1)"])


def test_the_cheapest_busy_node_is_drained_and_one_per_decision() -> None:
    two = [raw_pod("w1", node="a"), raw_pod("w2", node="a")]
    nodes = [view("a", 1, two), view("b", 2, [raw_pod("w3", node="b")]), view("c", 3, [raw_pod("w4", node="c")])]
    idle, drain, kept = pick_case(nodes, remove=2)
    assert (idle, drain) == ([], "c")  # fewest pods; the newer of b and c
    assert kept == [f"kept b: {ONE_PER_DECISION}", f"kept a: {ONE_PER_DECISION}"]  # newest first


def test_a_job_keeps_its_node_and_a_pod_that_fits_nowhere_too() -> None:
    nodes = [view("a", 1, [raw_pod("train", owner="Job", node="a", gpus=8)]),
             view("b", 2, [raw_pod("big", node="b", gpus=8)])]
    idle, drain, kept = pick_case(nodes)
    assert (idle, drain) == ([], None)
    assert kept[0].startswith("kept b: pod ml/big fits on none of the pool's 1 other nodes (a: needs nvidia.com/gpu 8")
    assert kept[1] == "kept a: pod ml/train is owned by a Job (movable: ReplicaSet, StatefulSet): cannot move"


def test_cordoned_nodes_take_no_pods_and_the_floor_holds() -> None:
    nodes = [view("a", 1, [raw_pod(node="a")]), view("b", 2, [], unschedulable=True)]
    assert pick_case(nodes)[1] is None  # b is someone else's cordon: the pod has nowhere to go
    nodes = [view("a", 1, [raw_pod(node="a")]), view("b", 2, [raw_pod("w2", node="b")])]
    assert pick_case(nodes, floor=2)[:2] == ([], None)  # two nodes, floor 2: nothing goes
    assert pick_case(nodes, floor=1)[1] == "b"


def test_a_big_pool_tries_at_most_max_tried_busy_nodes() -> None:
    from autoscaler.cluster.movable import MAX_TRIED, NOT_TRIED

    full = [view(f"n{i:02d}", 1 + i % 28, [raw_pod(f"w{i}", node=f"n{i:02d}", gpus=8)]) for i in range(MAX_TRIED + 3)]
    idle, drain, kept = pick_case(full)
    assert (idle, drain) == ([], None)  # every node is full: no pod fits anywhere
    assert sum(why.endswith(NOT_TRIED) for why in kept) == 3
    assert sum("fits on none" in why for why in kept) == MAX_TRIED
