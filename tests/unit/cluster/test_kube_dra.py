"""autoscaler/cluster/kube.py + kube_dra.py: the DRA lists through the real client against the fake API server."""
from __future__ import annotations

import html
import logging
import re
from pathlib import Path
from typing import Iterator

import pytest
from flask import Flask

from autoscaler.cluster.kube import KubeCluster
from autoscaler.cluster.nodes import ClusterError
from autoscaler.config import KubernetesConfig
from autoscaler.store import NodesView, open_store
from tests.support.fakes.kube import FakeKube
from tests.support import AUTH, FakeClock, make_app

POOL = {"pool": "h100"}
DRA_LISTS = ("LIST deviceclasses", "LIST resourceslices", "LIST resourceclaims")


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        for i in range(4):
            fake.add_dra_node(f"h100-{i}", POOL)
        fake.add_claim_pod("train-0", "h100-0", gpus=8)
        fake.add_claim_pod("serve-0", "h100-1", gpus=1, owner="ReplicaSet")
        yield fake


def cluster(fake: FakeKube, page: int = 5000, **extra: object) -> KubeCluster:
    return KubeCluster(KubernetesConfig(host=fake.url, token=fake.token, verify_ssl=False, **extra), page=page)


def dra_calls(fake: FakeKube) -> dict[str, int]:
    return {k: v for k, v in fake.calls.items() if k in DRA_LISTS}


def h100_app(kube: FakeKube, tmp_path: Path, clock: FakeClock, **pool: object) -> Flask:
    """The app over the fake cluster with one simulated pool `h100` of 4 nodes (node selector pool=h100)."""
    pools = [{"name": "h100", "provider": "simulated", "min": 0, "max": 8, "node_selector": "pool=h100",
              "simulated": {"initial_count": 4}, **pool}]
    return make_app(f"sqlite:///{tmp_path}/a.db", clock=clock, pools=pools, rules=[],
                    kubernetes={"host": kube.url, "token": kube.token})


def test_a_dra_pool_read_sees_the_claims_and_the_devices(kube: FakeKube) -> None:
    kube.add_claim_pod("wait-0", "", gpus=2, labels={"gpu-autoscaler/pool": "h100"})
    read = cluster(kube).read_pool("h100", POOL)
    views = {v.name: v for v in read.nodes}
    assert [p.describe() for p in views["h100-0"].gpu_pods] == ["ml/train-0 (gpu.nvidia.com 8)"]
    assert [p.describe() for p in views["h100-1"].gpu_pods] == ["ml/serve-0 (gpu.nvidia.com 1)"]
    assert [v.busy_reason() is None for v in read.nodes] == [False, False, True, True]
    assert {n: (v.gpu_allocatable, v.gpus_used()) for n, v in views.items()} == {
        "h100-0": (8, 8), "h100-1": (8, 1), "h100-2": (8, 0), "h100-3": (8, 0)}
    assert (read.pending, read.dra, read.dra_reason) == (2, "read", "")
    assert dra_calls(kube) == dict.fromkeys(DRA_LISTS, 1)


def test_the_lists_are_paged(kube: FakeKube) -> None:
    for i in range(7):
        kube.add_claim_pod(f"more-{i}", "h100-3", gpus=1, devices=[f"gpu-{i}"])
    views = {v.name: v for v in cluster(kube, page=3).nodes(POOL)}
    assert views["h100-3"].gpus_used() == 7 and len(views["h100-3"].gpu_pods) == 7
    assert kube.calls["LIST resourceclaims"] == 3  # 9 claims in pages of 3
    assert kube.calls["LIST resourceslices"] == 2 and kube.calls["LIST deviceclasses"] == 1
    pages = [p for m, p in kube.log if "resourceclaims" in p]
    assert len(pages) == 3


def test_once_per_tick_for_all_pools(kube: FakeKube) -> None:
    for i in range(2):
        kube.add_dra_node(f"a100-{i}", {"pool": "a100"})
    c = cluster(kube)
    with c.once():
        c.read_pool("h100", POOL)
        c.read_pool("a100", {"pool": "a100"})
        c.marked(POOL)
    assert dra_calls(kube) == dict.fromkeys(DRA_LISTS, 1)
    c.nodes(POOL)  # a decision's own read, outside the tick: read afresh
    assert dra_calls(kube) == dict.fromkeys(DRA_LISTS, 2)


def test_a_device_plugin_cluster_makes_no_dra_call() -> None:
    with FakeKube() as fake:
        fake.add_node("dp-0", POOL, gpus=8)
        fake.add_pod("train", "dp-0", gpus=8)
        c = cluster(fake)
        read = c.read_pool("h100", POOL)
        assert c.marked(POOL)[0].gpu_allocatable == 8 and c.node("dp-0") is not None
    assert dra_calls(fake) == {} and read.dra == "unused" and read.nodes[0].busy_reason()


UNREAD = "runs pod ml/{} with resource claims (DRA not read (403): claim not counted, so it may hold GPUs)"
RULE = ('- apiGroups: ["resource.k8s.io"] resources: ["resourceslices", "resourceclaims", "deviceclasses"] '
        'verbs: ["get", "list"]')


@pytest.mark.parametrize("status, reason, kept", [
    pytest.param(404, "404: the API server does not serve resource.k8s.io/v1", [None] * 4, id="no-api"),
    pytest.param(403, "403: the service account may not list deviceclasses",
                 [UNREAD.format("train-0"), UNREAD.format("serve-0"), None, None], id="rbac"),
])
def test_no_api_or_no_rbac_logged_once(kube: FakeKube, status: int, reason: str, kept: list[str | None],
                                       caplog: pytest.LogCaptureFixture) -> None:
    kube.dra.status = status
    c = cluster(kube)
    with caplog.at_level(logging.INFO, logger="autoscaler.cluster.kube_dra"):
        first = c.read_pool("h100", POOL)
        again = c.read_pool("h100", POOL)
    assert first.dra == again.dra == "not_read" and first.dra_reason.startswith(reason)
    assert [v.gpu_allocatable for v in first.nodes] == [0, 0, 0, 0]  # no device plugin, no GPUs seen
    # 404: no pod can hold a claim, as before; 403: a claim-holding pod keeps its node (its GPUs are unseen)
    assert [v.busy_reason() for v in first.nodes] == kept
    said = [r.getMessage() for r in caplog.records if "DRA not read" in r.getMessage()]
    assert len(said) == 1 and reason in said[0]
    assert (RULE in said[0]) == (status == 403)  # the 403 warning names the ClusterRole rule to add
    kube.dra.status = 200  # the API came (an upgrade, or the RBAC fixed): read again, and said so
    with caplog.at_level(logging.INFO, logger="autoscaler.cluster.kube_dra"):
        assert c.read_pool("h100", POOL).dra == "read"
    assert any("DRA read again" in r.getMessage() for r in caplog.records)


def test_a_failed_dra_read_fails_the_pools_read_and_is_not_retried_in_the_tick(kube: FakeKube) -> None:
    c = cluster(kube, timeout=0.5)
    kube.dra.status = 500
    with c.once():
        with pytest.raises(ClusterError, match="listing DeviceClasses: 500"):
            c.read_pool("h100", POOL)
        with pytest.raises(ClusterError, match="listing DeviceClasses: 500"):
            c.marked(POOL)
    assert kube.calls["LIST deviceclasses"] == 1  # the second read of the tick re-used the failure


def test_the_re_read_of_one_node_sees_its_claims(kube: FakeKube) -> None:
    view = cluster(kube).node("h100-1")
    assert view is not None and [p.describe() for p in view.gpu_pods] == ["ml/serve-0 (gpu.nvidia.com 1)"]


def test_a_joined_node_has_gpus_once_its_slices_appear(kube: FakeKube) -> None:
    kube.add_dra_node("h100-4", POOL, publish=False, created="2026-11-26T10:00:00Z")
    c = cluster(kube)
    assert {v.name: v.gpu_allocatable for v in c.marked(POOL)}["h100-4"] == 0
    kube.dra.publish("h100-4")
    assert {v.name: v.gpu_allocatable for v in c.marked(POOL)}["h100-4"] == 8


def test_empty_gpu_device_classes_reads_no_dra(kube: FakeKube) -> None:
    read = cluster(kube, gpu_device_classes=[]).read_pool("h100", POOL)
    assert read.dra == "not_read" and read.dra_reason == "kubernetes.gpu_device_classes is empty"
    assert dra_calls(kube) == {}


def test_a_stored_node_view_of_a_big_pool_reads_back_whole(tmp_path: Path) -> None:
    """Before: the node bodies' JSON was cut at 4096 characters like a reason, and a pool of more than about 25
    nodes could not be read back (JSONDecodeError)."""
    store = open_store(f"sqlite:///{tmp_path}/v.db")
    nodes = [{"name": f"gpu-node-{i:03d}", "ready": True, "gpu_pods": [], "protected": None, "cordoned": False,
              "cordoned_by_us": False, "removable": True} for i in range(500)]
    store.save_nodes(NodesView("h100", nodes, None, 1.0, {"allocatable": 4000, "requested": 10, "pending": 2},
                               "not_read", "403: rbac"))
    view = store.nodes_view("h100")
    assert view is not None and view.nodes == nodes and view.gpus == {"allocatable": 4000, "requested": 10,
                                                                      "pending": 2}
    assert (view.dra, view.dra_reason) == ("not_read", "403: rbac")
    store.save_nodes(NodesView("old", nodes[:2], None, 1.0))  # without GPU counts: the list as before
    old = store.nodes_view("old")
    assert old is not None and old.nodes == nodes[:2] and old.gpus is None and old.dra == ""


@pytest.mark.parametrize("classes, code, says", [
    pytest.param(None, 0, "OK: 1 pool(s)", id="default"),
    pytest.param(["gpu.nvidia.com", "mig.nvidia.com", "gpu.example.com"], 0, "OK: 1 pool(s)", id="a third class"),
    pytest.param([], 0, "OK: 1 pool(s)", id="none-dra-off"),
    pytest.param(["gpu.nvidia.com", "Bad Class"], 1, "kubernetes.gpu_device_classes[1]: 'Bad Class' is not a "
                 "DeviceClass name (a lower-case DNS subdomain, e.g. gpu.nvidia.com)", id="not-a-class-name"),
])
def test_check_config_takes_gpu_device_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               classes: list[str] | None, code: int, says: str) -> None:
    import yaml

    from autoscaler.__main__ import main

    kubernetes: dict[str, object] = {"host": "http://127.0.0.1:1"}
    if classes is not None:
        kubernetes["gpu_device_classes"] = classes
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"server": {"auth": {"bearer_tokens": ["abcdefghijkl-123456"]}},
                                    "store": {"url": f"sqlite:///{tmp_path}/c.db"}, "kubernetes": kubernetes,
                                    "pools": [{"name": "sim", "provider": "simulated", "min": 0, "max": 3,
                                               "node_selector": "pool=sim"}]}))
    assert main(["check-config", str(path)]) == code
    out = capsys.readouterr()
    assert says in out.out + out.err


@pytest.mark.parametrize("status, dra, reason", [
    pytest.param(200, "read", None, id="read"),
    pytest.param(403, "not_read", "403: the service account may not list deviceclasses", id="rbac"),
    pytest.param(404, "not_read", "404: the API server does not serve resource.k8s.io/v1", id="no-api"),
])
def test_the_pool_answer_says_whether_dra_was_read(kube: FakeKube, tmp_path: Path, status: int, dra: str,
                                                   reason: str | None) -> None:
    from autoscaler.reconcile.loop import Reconciler

    kube.dra.status = status
    clock = FakeClock()
    app = h100_app(kube, tmp_path, clock)
    reconciler: Reconciler = app.extensions["autoscaler_reconciler"]
    reconciler.tick(clock())
    body = app.test_client().get("/api/v1/pools/h100", headers=AUTH).get_json()
    assert body["dra"] == dra and body.get("dra_reason", "").startswith(reason or "")
    assert ("dra_reason" in body) == (reason is not None)
    assert body["gpus"] == ({"allocatable": 32, "requested": 9, "pending": 0} if status == 200 else
                            {"allocatable": 0, "requested": 0, "pending": 0})  # as before: nothing seen
    removable = {n["name"]: n["removable"] for n in body["nodes"]}
    assert removable == ({"h100-0": False, "h100-1": False, "h100-2": True, "h100-3": True} if status != 404 else
                         dict.fromkeys(removable, True))  # 403: the claim-holding nodes are not removable either


def test_the_stored_in_flight_reads_the_nodes_gpus(kube: FakeKube, tmp_path: Path) -> None:
    """A node the service asked for is in flight until its slices appear, not until provision_time has passed
    (before: the stored view counted recorded scale-outs only, so a DRA node joined with its GPUs stayed in flight,
    and past provision_time was a NodesNotReadyInTime shortfall)."""
    from datetime import datetime, timezone

    from autoscaler.reconcile.loop import Reconciler

    clock = FakeClock()
    app = h100_app(kube, tmp_path, clock, provision_time="5m")
    client = app.test_client()
    reconciler: Reconciler = app.extensions["autoscaler_reconciler"]

    def in_flight() -> int:
        reconciler.tick(clock())
        return int(client.get("/api/v1/pools/h100", headers=AUTH).get_json()["in_flight"])

    assert client.post("/api/v1/pools/h100/scale", headers=AUTH, json={"target": 6}).get_json()["outcome"] == "scaled"
    created = datetime.fromtimestamp(clock(), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.add_dra_node("h100-4", POOL, created=created, publish=False)
    kube.add_dra_node("h100-5", POOL, created=created, publish=False)
    clock.advance(30)
    assert in_flight() == 2
    kube.dra.publish("h100-4")
    clock.advance(30)
    assert in_flight() == 1  # h100-5 has not published its GPUs
    clock.advance(300)
    reconciler.tick(clock())
    short = [e for e in client.get("/api/v1/events?pool=h100", headers=AUTH).get_json()["events"]
             if e["outcome"] == "no_capacity"]
    assert [{k: e["details"][k] for k in ("code", "asked", "delivered")} for e in short] == [
        {"code": "NodesNotReadyInTime", "asked": 6, "delivered": 5}]


def test_without_the_rbac_the_marked_list_sees_which_nodes_hold_claims(kube: FakeKube) -> None:
    """In flight and NodesNotReadyInTime read the marked list (nodes without pods): while DRA is refused it lists
    the pods too, once, so that a node whose pods hold claims counts as GPU-ready; with DRA read it does not."""
    c = cluster(kube)
    assert all(not v.claims_unread for v in c.marked(POOL)) and kube.calls["LIST pods"] == 0
    kube.dra.status = 403
    marked = {v.name: v for v in c.marked(POOL)}
    assert kube.calls["LIST pods"] == 1
    assert [(v.gpu_ready, v.dra_unread, v.gpu_pods) for v in marked.values()] == [
        (True, "403", ()), (True, "403", ()), (False, "403", ()), (False, "403", ())]
    kube.dra.status = 404
    assert all(not v.gpu_ready for v in c.marked(POOL)) and kube.calls["LIST pods"] == 1


def test_the_re_read_of_a_victim_keeps_it_without_the_rbac(kube: FakeKube) -> None:
    kube.dra.status = 403
    view = cluster(kube).node("h100-1")
    assert view is not None and view.busy_reason() == UNREAD.format("serve-0")


def test_without_the_rbac_claim_holding_nodes_are_no_shortfall(kube: FakeKube, tmp_path: Path) -> None:
    """Before: with DRA refused every DRA node had no GPUs, so past provision_time the nodes asked for were a
    NodesNotReadyInTime shortfall (asked 6, delivered 0) although they ran the claim-holding pods."""
    from datetime import datetime, timezone

    from autoscaler.reconcile.loop import Reconciler

    kube.dra.status = 403
    clock = FakeClock()
    app = h100_app(kube, tmp_path, clock, provision_time="5m")
    client = app.test_client()
    reconciler: Reconciler = app.extensions["autoscaler_reconciler"]
    assert client.post("/api/v1/pools/h100/scale", headers=AUTH, json={"target": 6}).get_json()["outcome"] == "scaled"
    created = datetime.fromtimestamp(clock(), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in ("h100-4", "h100-5"):
        kube.add_dra_node(name, POOL, created=created)
    for i in range(2, 6):  # every node runs a claim-holding pod (h100-0 and h100-1 already do)
        kube.add_claim_pod(f"work-{i}", f"h100-{i}", gpus=1)
    clock.advance(30)
    reconciler.tick(clock())
    assert client.get("/api/v1/pools/h100", headers=AUTH).get_json()["in_flight"] == 0
    clock.advance(330)
    reconciler.tick(clock())
    events = client.get("/api/v1/events?pool=h100", headers=AUTH).get_json()["events"]
    assert [e["outcome"] for e in events if e["outcome"] == "no_capacity"] == []


@pytest.mark.parametrize("status", [200, 403, 404], ids=["dra-read", "dra-refused", "dra-not-served"])
def test_the_status_page_shows_the_decisions_own_removability(kube: FakeKube, tmp_path: Path, status: int) -> None:
    """The page's "removable / why" is the API's ``removable``/``why`` for every node, DRA read or not. Before: the
    page decided "none: may go" from the GPU pods it could see, so with the DRA read refused it said "may go" for a
    node whose GPUs a training Job holds through a claim, while the API said ``removable: false``."""
    from autoscaler.reconcile.loop import Reconciler

    kube.dra.status = status
    clock = FakeClock()
    app = h100_app(kube, tmp_path, clock)
    reconciler: Reconciler = app.extensions["autoscaler_reconciler"]
    reconciler.tick(clock())
    client = app.test_client()
    nodes = client.get("/api/v1/pools/h100", headers=AUTH).get_json()["nodes"]
    page = client.get("/", headers=AUTH).get_data(as_text=True)
    cells = re.findall(r'<tr class="node" data-node="([^"]+)">.*?<td class="removable">(.*?)</td>', page, re.S)
    shown = {name: html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for name, cell in cells}
    assert shown == {n["name"]: "yes" if n["removable"] else f"no: {n['why']}" for n in nodes}
    kept = {n["name"] for n in nodes if not n["removable"]}
    assert kept == (set() if status == 404 else {"h100-0", "h100-1"})
    assert all(n["why"] is None for n in nodes if n["removable"])
