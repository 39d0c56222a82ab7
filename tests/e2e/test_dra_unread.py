"""DRA not read (403, RBAC without the resource.k8s.io rules): a pod holding claims may hold GPUs the service cannot
see, so its node is kept from scale-in, is no room for others' pods, and counts as GPU-ready (pure, table cases).
With the API absent (404) no pod can hold a claim: as before."""
from __future__ import annotations

from typing import Any

import pytest

from autoscaler.cluster.dra import not_read
from autoscaler.cluster.movable import pick_movable
from autoscaler.cluster.nodes import node_view, parse_time, pick_victims
from autoscaler.decide.inflight import from_nodes, unregistered
from tests.support.fakes.kube import FakeKube

POOL = {"pool": "h100"}
REFUSED = not_read("403: the service account may not list deviceclasses", unseen="403")
ABSENT = not_read("404: the API server does not serve resource.k8s.io/v1")


@pytest.fixture()
def kube() -> Any:
    with FakeKube() as fake:  # a builder of the API's shapes only: nothing calls it
        yield fake


def views(kube: FakeKube, dra: Any) -> dict[str, Any]:
    pods: dict[str, list[dict[str, Any]]] = {n: [] for n in kube.nodes}
    for p in kube.pods.values():
        pods.setdefault(p["spec"].get("nodeName") or "", []).append(p)
    return {n: node_view(kube.nodes[n], pods[n], dra=dra) for n in kube.nodes}


def _claim(k: FakeKube) -> None:
    k.add_claim_pod("serve-0", "n", gpus=1, owner="ReplicaSet")


def _two(k: FakeKube) -> None:
    k.add_claim_pod("serve-0", "n", gpus=1, owner="ReplicaSet")
    k.add_claim_pod("serve-1", "n", gpus=1, owner="ReplicaSet")


def _daemonset(k: FakeKube) -> None:  # a DaemonSet's pod would not stop if the node went
    k.add_claim_pod("probe", "n", gpus=1, owner="DaemonSet")


def _finished(k: FakeKube) -> None:
    k.add_claim_pod("done", "n", gpus=1, phase="Succeeded")


def _extended(k: FakeKube) -> None:  # a device-plugin request is seen: named by it, as before
    k.add_pod("ext", "n", gpus=2)
    k.pods[("ml", "ext")]["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": "nic-0"}]


def _plain(k: FakeKube) -> None:
    k.add_pod("web", "n", owner="ReplicaSet")


KEPT = "runs pod ml/serve-0 with resource claims (DRA not read (403): claim not counted, so it may hold GPUs)"


@pytest.mark.parametrize("build, dra, reason, gpu_ready", [
    pytest.param(_claim, REFUSED, KEPT, True, id="403-claim-pod-keeps-its-node"),
    pytest.param(_two, REFUSED, KEPT.replace("serve-0", "serve-0 and 1 more"), True, id="403-two-named-once"),
    pytest.param(_claim, ABSENT, None, False, id="404-no-pod-can-hold-a-claim"),
    pytest.param(_claim, None, None, False, id="not-asked"),
    pytest.param(_daemonset, REFUSED, None, False, id="403-daemonset-pod-not-counted"),
    pytest.param(_finished, REFUSED, None, False, id="403-finished-pod-not-counted"),
    pytest.param(_extended, REFUSED, "runs GPU pod ml/ext (nvidia.com/gpu 2)", True, id="403-extended-request-seen"),
    pytest.param(_plain, REFUSED, None, False, id="403-no-claims-idle"),
])
def test_what_keeps_a_node_while_dra_is_not_read(kube: FakeKube, build: Any, dra: Any, reason: str | None,
                                                 gpu_ready: bool) -> None:
    if build is _extended:
        kube.add_node("n", POOL)  # device plugin: 8 nvidia.com/gpu
    else:
        kube.add_dra_node("n", POOL)
    build(kube)
    view = views(kube, dra)["n"]
    assert view.busy_reason() == reason
    assert view.gpu_ready is gpu_ready
    assert view.gpu_allocatable == (8 if build is _extended else 0)  # nothing invented: the devices are unseen
    assert view.dra_unread == ("403" if dra is REFUSED and build is not _extended else "")


def test_idle_scale_in_keeps_the_claim_holding_nodes(kube: FakeKube) -> None:
    for i in range(4):
        kube.add_dra_node(f"h100-{i}", POOL, created=f"2026-11-{10 + i:02d}T00:00:00Z")
    kube.add_claim_pod("train-0", "h100-0", gpus=8)
    kube.add_claim_pod("serve-0", "h100-1", gpus=1, owner="ReplicaSet")
    chosen, kept = pick_victims(list(views(kube, REFUSED).values()), 3, [], "idle", 0)
    assert [n.name for n in chosen] == ["h100-3", "h100-2"]
    assert [why for _, why in kept] == [
        "kept h100-1: runs pod ml/serve-0 with resource claims (DRA not read (403): claim not counted, so it may "
        "hold GPUs)",
        "kept h100-0: runs pod ml/train-0 with resource claims (DRA not read (403): claim not counted, so it may "
        "hold GPUs)"]
    chosen, _ = pick_victims(list(views(kube, ABSENT).values()), 3, [], "idle", 0)
    assert len(chosen) == 3  # 404: the API is absent, so no pod holds a claim: as before


def test_movable_neither_moves_unseen_claims_nor_puts_pods_beside_them(kube: FakeKube) -> None:
    kube.add_node("dp-0", POOL, gpus=8, created="2026-11-10T00:00:00Z")  # device plugin, holds a claim pod
    kube.add_node("dp-1", POOL, gpus=8, created="2026-11-11T00:00:00Z")  # device plugin, one movable GPU pod
    kube.add_claim_pod("nic-user", "dp-0", gpus=1, owner="ReplicaSet")
    kube.add_pod("serve", "dp-1", gpus=1, owner="ReplicaSet")
    seen = list(views(kube, REFUSED).values())
    pick = pick_movable(seen, 1, [], 0)
    kept = dict((n.name, why) for n, why in pick.kept)
    assert (pick.idle, pick.drain) == ([], None)
    assert kept["dp-0"] == ("kept dp-0: runs pod ml/nic-user with resource claims (DRA not read (403): claim not "
                            "counted, so it may hold GPUs): cannot move")
    assert kept["dp-1"] == "kept dp-1: pod ml/serve has no other node of the pool to go to"  # dp-0 is no room
    pick = pick_movable(list(views(kube, ABSENT).values()), 1, [], 0)  # 404: dp-0 is idle, and room
    assert [n.name for n in pick.idle] == ["dp-0"]


NOW = parse_time("2026-11-26T10:01:00Z") or 0.0
HINT = "DRA not read (403): the GPUs of a node without device-plugin GPUs and without a pod holding claims are not seen"


def test_in_flight_counts_claim_holding_nodes_as_gpu_ready(kube: FakeKube) -> None:
    kube.add_dra_node("busy", POOL, created="2026-11-26T10:00:00Z")
    kube.add_dra_node("idle", POOL, created="2026-11-26T10:00:00Z")
    kube.add_claim_pod("train", "busy", gpus=8)
    assert from_nodes(list(views(kube, REFUSED).values()), 2, NOW, 300)[0] == 1  # idle: its GPUs may be coming
    assert from_nodes(list(views(kube, ABSENT).values()), 2, NOW, 300)[0] == 2  # 404: neither has GPUs


def _busy_and_idle(k: FakeKube) -> None:  # the pool runs DRA work: the idle node's GPUs are unseen, not absent
    k.add_dra_node("idle", POOL)
    k.add_claim_pod("train", "busy", gpus=8)


def _busy_and_not_ready(k: FakeKube) -> None:
    k.add_dra_node("down", POOL, ready=False)
    k.add_claim_pod("train", "busy", gpus=8)


def _idle_only(k: FakeKube) -> None:  # no claim anywhere: no evidence of DRA, reported with the hint
    k.add_dra_node("idle", POOL)


@pytest.mark.parametrize("build, dra, delivered, says", [
    pytest.param(_busy_and_idle, REFUSED, None, None, id="403-pool-with-claims-no-shortfall"),
    pytest.param(_busy_and_not_ready, REFUSED, 1, "1 of 2 node(s)", id="403-a-not-ready-node-is-still-short"),
    pytest.param(_idle_only, REFUSED, 0, HINT, id="403-no-claims-reported-with-the-hint"),
    pytest.param(_busy_and_idle, ABSENT, 0, "2 of 2 node(s)", id="404-as-before"),
])
def test_not_ready_in_time_while_dra_is_not_read(kube: FakeKube, build: Any, dra: Any, delivered: int | None,
                                                 says: str | None) -> None:
    if build is not _idle_only:
        kube.add_dra_node("busy", POOL)
    else:
        kube.add_dra_node("idle-2", POOL)
    build(kube)
    found = unregistered(list(views(kube, dra).values()), 2, NOW, 300, NOW - 600, None)
    if delivered is None:
        assert found is None
    else:
        assert found is not None and found[0] == delivered and says in found[1], found
        assert (HINT in found[1]) == (says == HINT)
