"""autoscaler/cluster/dra.py and gpus.py: a node's GPUs and a pod's through DRA, counted purely (table cases)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from autoscaler.cluster.dra import NOT_READ, READ, class_driver, dra_state, not_read
from autoscaler.cluster.gpus import pending_gpus, waits_for
from autoscaler.cluster.nodes import node_view
from autoscaler.engine.facts import used_on_nodes
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.kube_dra import DraObjects, claim_pod, device_class, gpu_device

CLASSES = ["gpu.nvidia.com", "mig.nvidia.com"]
POOL = {"pool": "h100"}


_BUILDER: list[FakeKube] = []


@pytest.fixture(autouse=True)
def _builder() -> Any:
    with FakeKube() as fake:  # used as a builder of the API's shapes only: nothing calls it
        _BUILDER.append(fake)
        yield
        _BUILDER.clear()


def cluster() -> FakeKube:
    """A fresh FakeKube's state, to build the API's shapes with."""
    fake = _BUILDER[-1]
    fake.nodes.clear(), fake.pods.clear()
    fake.dra = DraObjects()
    return fake


def read(kube: FakeKube, node: str, classes: list[str] = CLASSES) -> Any:
    """The node's view as the cluster client builds it from the same shapes."""
    dra = dra_state(kube.dra.classes.values(), kube.dra.slices.values(), kube.dra.claims.values(), classes)
    pods = [p for p in kube.pods.values() if p["spec"].get("nodeName") == node]
    return node_view(kube.nodes[node], pods, dra=dra)


def _shared(k: FakeKube) -> None:
    k.dra.add_claim("shared-gpus", count=2, node="n", pods=["a"])
    k.add_claim_pod("a", "n", claim="shared-gpus", shared=True, owner="ReplicaSet")
    k.add_claim_pod("b", "n", claim="shared-gpus", shared=True, owner="ReplicaSet")


def _extended(k: FakeKube) -> None:  # the scheduler's claim for a pod's nvidia.com/gpu: 1 (DRAExtendedResource)
    k.add_pod("ext", "n", gpus=1)
    k.dra.add_claim("ext-extended-resources-x", count=1, node="n", pods=["ext"], extended=True)
    k.pods[("ml", "ext")]["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "ext-extended-resources-x",
        "requestMappings": [{"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "gpu"}]}


def _mig(k: FakeKube) -> None:
    k.dra.slices.clear()
    k.dra.add_slice("n", [gpu_device(i, kind="mig") for i in range(7)])
    k.add_claim_pod("small", "n", gpus=1, device_class="mig.nvidia.com", devices=["gpu-0-mig-1g10gb-0"])


def _tainted(k: FakeKube) -> None:
    k.dra.slices.clear()
    taint = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute", "timeAdded": "2026-11-26T10:00:00Z"}]
    k.dra.add_slice("n", [gpu_device(i, taints=taint if i == 7 else None) for i in range(8)])


def _older_generation(k: FakeKube) -> None:  # the driver republished after a GPU fell off the bus
    k.dra.add_slice("n", [gpu_device(i) for i in range(6)], generation=2)


def _not_all_published(k: FakeKube) -> None:  # generation 2 comes in two slices; one is there so far
    k.dra.slices.clear()
    k.dra.add_slice("n", [gpu_device(i) for i in range(4)], generation=2, count=2)


def _all_published(k: FakeKube) -> None:
    k.dra.slices.clear()
    k.dra.add_slice("n", [gpu_device(i) for i in range(4)], generation=2, count=2)
    k.dra.add_slice("n", [gpu_device(i) for i in range(4, 8)], generation=2, count=2, index=1)


def _other_driver(k: FakeKube) -> None:  # a NIC driver's devices on the same node are no GPUs
    k.dra.add_slice("n", [{"name": f"nic-{i}"} for i in range(4)], driver="dra.net")


def _template_claim(k: FakeKube) -> None:
    k.add_claim_pod("train", "n", gpus=8)


@pytest.mark.parametrize("build, allocatable, used, free, gpu_pods", [
    pytest.param(lambda k: None, 8, 0, 8, [], id="idle-dra-node"),
    pytest.param(_template_claim, 8, 8, 0, ["ml/train (gpu.nvidia.com 8)"], id="claim-from-template"),
    pytest.param(_shared, 8, 2, 6, ["ml/a (gpu.nvidia.com 2)", "ml/b (gpu.nvidia.com 2)"],
                 id="shared-claim-counted-once-per-node"),
    pytest.param(_extended, 8, 1, 7, ["ml/ext (nvidia.com/gpu 1)"], id="extended-resource-claim-not-counted-twice"),
    pytest.param(_mig, 7, 1, 6, ["ml/small (mig.nvidia.com 1)"], id="mig-class"),
    pytest.param(_tainted, 7, 0, 7, [], id="tainted-device-not-a-gpu"),
    pytest.param(_older_generation, 6, 0, 6, [], id="older-slice-generation-ignored"),
    pytest.param(_not_all_published, 0, 0, None, [], id="slices-not-all-published-count-nothing-yet"),
    pytest.param(_all_published, 8, 0, 8, [], id="slices-all-published"),
    pytest.param(_other_driver, 8, 0, 8, [], id="other-drivers-devices-are-no-gpus"),
])
def test_a_dra_nodes_gpus(build: Any, allocatable: int, used: int, free: int | None, gpu_pods: list[str]) -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    build(k)
    view = read(k, "n")
    assert view.gpu_allocatable == allocatable
    assert view.gpus_used() == used
    assert dict(view.free).get("gpu.nvidia.com") == (Decimal(free) if free is not None else None)
    assert [p.describe() for p in view.gpu_pods] == gpu_pods
    assert (view.busy_reason() is None) == (not gpu_pods)


def test_shared_claim_devices_go_with_one_pod_in_the_fit() -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    _shared(k)
    asks = {p.name: dict(p.requests).get("gpu.nvidia.com") for p in read(k, "n").pods}
    assert asks == {"a": Decimal(2), "b": None}


def test_device_plugin_node_is_counted_as_before_with_dra_read() -> None:
    k = cluster()
    k.add_node("dp", POOL, gpus=8)
    k.add_pod("train", "dp", gpus=4)
    view = read(k, "dp")
    assert (view.gpu_allocatable, view.gpus_used(), view.gpu_resources) == (8, 4, ("nvidia.com/gpu",))
    assert dict(view.free)["nvidia.com/gpu"] == Decimal(4) and "gpu.nvidia.com" not in dict(view.free)


def test_without_dra_a_dra_node_has_no_gpus_as_before() -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    k.add_claim_pod("train", "n", gpus=8)
    pods = [p for p in k.pods.values()]
    for dra in (None, not_read("404: no API")):
        view = node_view(k.nodes["n"], pods, dra=dra)
        assert (view.gpu_allocatable, view.gpu_pods, view.busy_reason()) == (0, (), None)


def test_headroom_spare_reads_the_claimed_devices() -> None:
    k = cluster()
    for name in ("n0", "n1"):
        k.add_dra_node(name, POOL)
    k.add_claim_pod("train", "n0", gpus=8)
    k.add_claim_pod("serve", "n1", gpus=3, devices=["gpu-0", "gpu-1", "gpu-2"])
    used, how = used_on_nodes([read(k, "n0"), read(k, "n1")], 8)
    assert used == 11 / 8
    assert how == "the cluster: 2 Ready node(s), 1 with free GPUs (5 GPU(s) free), 11 GPU(s) requested"


def test_headroom_counts_a_shared_claim_once() -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    _shared(k)  # two pods share one claim of 2 GPUs
    used, how = used_on_nodes([read(k, "n")], 8)
    assert used == 2 / 8 and how.endswith("(6 GPU(s) free), 2 GPU(s) requested")


def test_a_dra_pod_moves_only_where_enough_devices_are_free() -> None:
    from autoscaler.cluster.movable import pick_movable

    k = cluster()
    for name in ("a", "b"):
        k.add_dra_node(name, POOL)
    k.add_claim_pod("serve", "a", gpus=2, owner="ReplicaSet")
    k.add_claim_pod("train", "b", gpus=7, devices=[f"gpu-{i}" for i in range(7)])
    views = [read(k, "a"), read(k, "b")]
    pick = pick_movable(views, 1, [], 0)
    assert pick.drain is None and pick.idle == []
    assert dict((n.name, why) for n, why in pick.kept)["a"] == (
        "kept a: pod ml/serve fits on none of the pool's 1 other nodes (b: needs gpu.nvidia.com 2, 1 free)")
    k.dra.claims[("ml", "train-gpu-x7k2p")]["status"]["allocation"]["devices"]["results"].pop()  # 6 held: 2 free
    pick = pick_movable([read(k, "a"), read(k, "b")], 1, [], 0)
    assert pick.drain is not None and pick.drain.name == "a"


@pytest.mark.parametrize("selectors, name, driver", [
    pytest.param([{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}], "gpus", "gpu.nvidia.com",
                 id="simple-form"),
    pytest.param([{"cel": {"expression": 'device.driver == "gpu.example.com" && device.attributes["x"].y'}}],
                 "mine", "gpu.example.com", id="double-quotes-and-more"),
    pytest.param([{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
                 "gpu.nvidia.com", "gpu.nvidia.com", id="no-driver-test-falls-back-to-the-class-name"),
    pytest.param([], "mig.nvidia.com", "mig.nvidia.com", id="no-selector"),
])
def test_class_driver(selectors: list[Any], name: str, driver: str) -> None:
    assert class_driver({"metadata": {"name": name}, "spec": {"selectors": selectors}}) == driver


def test_classes_not_in_gpu_device_classes_are_not_gpus() -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    k.add_claim_pod("train", "n", gpus=8)
    view = read(k, "n", classes=["mig.nvidia.com"])  # only MIG counts: the claim's class gpu.nvidia.com does not
    assert view.gpu_pods == () and view.gpu_allocatable == 8  # the driver's devices are still the node's GPUs


def test_all_mode_before_allocation_asks_for_a_nodes_worth() -> None:
    dra = DraObjects()
    dra.publish("n", 8)
    dra.add_claim("everything", mode="All")
    state = dra_state(dra.classes.values(), dra.slices.values(), dra.claims.values(), CLASSES)
    assert state.status == READ and state.claims[("ml", "everything")].gpus == 8


@pytest.mark.parametrize("labels, node_selector, expected", [
    pytest.param({"gpu-autoscaler/pool": "h100"}, {}, True, id="pool-label"),
    pytest.param({"gpu-autoscaler/pool": "a100"}, {"pool": "h100"}, False, id="other-pools-label-wins"),
    pytest.param({}, {"pool": "h100", "zone": "a"}, True, id="node-selector-asks-for-the-pools-labels"),
    pytest.param({}, {"pool": "a100"}, False, id="node-selector-for-another-pool"),
    pytest.param({}, {}, False, id="no-selector-no-label"),
])
def test_which_pool_an_unscheduled_pod_waits_for(labels: dict[str, str], node_selector: dict[str, str],
                                                 expected: bool) -> None:
    k = cluster()
    k.add_claim_pod("w", "", gpus=2, labels=labels)
    pod = k.pods[("ml", "w")]
    pod["spec"]["nodeSelector"] = node_selector
    assert waits_for(pod, "h100", POOL) is expected
    k.add_claim_pod("bound", "n", gpus=2, labels=labels)
    assert waits_for(k.pods[("ml", "bound")], "h100", POOL) is False  # scheduled: not waiting


def test_pending_counts_unallocated_claims_once_and_requests() -> None:
    k = cluster()
    k.add_dra_node("n", POOL)
    k.add_claim_pod("w1", "", gpus=2)
    k.dra.add_claim("shared", count=4)
    k.add_claim_pod("w2", "", claim="shared", shared=True)
    k.add_claim_pod("w3", "", claim="shared", shared=True)
    k.add_pod("w4", "", gpus=1)  # a device-plugin request of a pod waiting too
    k.add_claim_pod("w5", "", gpus=1)
    k.dra.add_claim("w5-gpu-x7k2p", count=1, node="n", pods=[])  # allocated already: on its way to a node
    dra = dra_state(k.dra.classes.values(), k.dra.slices.values(), k.dra.claims.values(), CLASSES)
    waiting = [p for p in k.pods.values() if not p["spec"].get("nodeName")]
    assert pending_gpus(waiting, ["nvidia.com/gpu"], dra) == 2 + 4 + 1
    assert pending_gpus(waiting, ["nvidia.com/gpu"], not_read("403")) == 1


def test_a_pod_with_a_template_claim_not_made_yet_asks_nothing_yet() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"name": "c"}]},
                           "status": {}}
    claim_pod(pod, {}, {"gpu": "p-gpu-abc"})
    del pod["status"]["resourceClaimStatuses"]
    state = dra_state([device_class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'")], [], [], CLASSES)
    assert pending_gpus([pod], ["nvidia.com/gpu"], state) == 0 and state.status == READ
    assert not_read("x").status == NOT_READ
