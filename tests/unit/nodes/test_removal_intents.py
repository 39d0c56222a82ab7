"""Issue 34 item 10 in one process: a node whose removal may have been sent stays cordoned until the cloud's view
settles it. The real app, the real kubernetes client against the fake API server, the real webhook provider against
a local endpoint, the real store (SQLite; the store round trip also on PostgreSQL). What a killed worker leaves (its
cordon and its record) is set up here as the worker would have left it; tests/e2e/test_scale_in_e2e.py kills one."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from flask import Flask

from autoscaler.app import create_app
from autoscaler.cluster.nodes import CORDON_ANNOTATION, cordon_mark
from autoscaler.nodes.scale_in import REMOVAL_GRACE
from autoscaler.store import RemovalIntent, Store
from tests.support import pg
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.kube import FakeKube
from tests.support import FakeClock, am_alert, am_payload, config, post

LABELS = {"agentpool": "gpunp"}
NOW = 1_800_000_000.0
DEAD = "host:1:dead-decision"


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        for i in range(3):
            fake.add_node(f"gpunp-{i}", LABELS, created=f"2026-11-0{i + 1}T00:00:00Z")
        yield fake


@pytest.fixture()
def hook() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


def make(tmp_path: Any, kube: FakeKube, hook: FakeHookServer, **webhook: Any) -> tuple[Flask, FakeClock]:
    clock = FakeClock(NOW)
    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": hook.hook_url("/runs"), "initial_count": 3, **webhook}}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
    return create_app(cfg, clock=clock, startup_check=False), clock


def store_of(app: Flask) -> Store:
    return app.extensions["autoscaler"].store  # type: ignore[no-any-return]


def left_by_a_killed_worker(app: Flask, kube: FakeKube, node: str, at: float, from_count: int = 3) -> None:
    """What a worker killed in the removal call leaves: its cordon (the decision's own mark) and its record."""
    kube.nodes[node]["spec"]["unschedulable"] = True
    kube.nodes[node]["metadata"]["annotations"][CORDON_ANNOTATION] = cordon_mark(DEAD, at)
    store_of(app).intend_removals([RemovalIntent("gpu", node, DEAD, at, from_count)])


def scale_out(app: Flask) -> dict[str, Any]:
    resp = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh")))
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def test_a_cloud_that_cannot_count_keeps_the_node_for_the_grace(tmp_path: Any, kube: FakeKube,
                                                                 hook: FakeHookServer) -> None:
    app, clock = make(tmp_path, kube, hook)
    left_by_a_killed_worker(app, kube, "gpunp-2", NOW - 100)
    assert scale_out(app)["outcome"] == "scaled"
    node = kube.nodes["gpunp-2"]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][CORDON_ANNOTATION] == cordon_mark(DEAD + "/removing", NOW - 100)
    assert store_of(app).removal_intents("gpu") == []  # settled: the mark carries it now
    clock.advance(REMOVAL_GRACE)  # the cloud never took it away: the grace of a removal lapses
    assert scale_out(app)["outcome"] == "scaled"
    assert "unschedulable" not in kube.nodes["gpunp-2"]["spec"]


def test_a_cloud_that_counts_fewer_machines_keeps_the_node(tmp_path: Any, kube: FakeKube,
                                                          hook: FakeHookServer) -> None:
    app, _ = make(tmp_path, kube, hook, tracks_count=False, count_url=hook.hook_url("/count"))
    left_by_a_killed_worker(app, kube, "gpunp-2", NOW - 100, from_count=3)
    hook.then(Answer(body={"count": 2}), Answer())  # the removal went: 2 where it was decided on 3
    assert scale_out(app)["outcome"] == "scaled"
    assert kube.nodes["gpunp-2"]["spec"]["unschedulable"] is True
    assert kube.nodes["gpunp-2"]["metadata"]["annotations"][CORDON_ANNOTATION].startswith(DEAD + "/removing@")
    assert store_of(app).removal_intents("gpu") == []


def test_a_busy_cloud_keeps_the_node_and_the_record(tmp_path: Any, kube: FakeKube, hook: FakeHookServer) -> None:
    app, _ = make(tmp_path, kube, hook, tracks_count=False, count_url=hook.hook_url("/count"))
    left_by_a_killed_worker(app, kube, "gpunp-2", NOW - 100)
    hook.then(Answer(body={"count": 3, "busy": True}))
    assert scale_out(app)["outcome"] == "skipped_busy"
    assert kube.nodes["gpunp-2"]["spec"]["unschedulable"] is True
    assert kube.nodes["gpunp-2"]["metadata"]["annotations"][CORDON_ANNOTATION] == cordon_mark(DEAD, NOW - 100)
    assert [i.node for i in store_of(app).removal_intents("gpu")] == ["gpunp-2"]


def test_a_cloud_settled_at_the_old_size_gets_the_node_back(tmp_path: Any, kube: FakeKube,
                                                             hook: FakeHookServer) -> None:
    """The removal never reached the cloud (3 machines, settled): the node is still wanted, its cordon lifted."""
    app, _ = make(tmp_path, kube, hook, tracks_count=False, count_url=hook.hook_url("/count"))
    left_by_a_killed_worker(app, kube, "gpunp-2", NOW - 100)
    hook.then(Answer(body={"count": 3}), Answer())
    assert scale_out(app)["outcome"] == "scaled"
    assert "unschedulable" not in kube.nodes["gpunp-2"]["spec"]
    assert CORDON_ANNOTATION not in kube.nodes["gpunp-2"]["metadata"]["annotations"]
    assert store_of(app).removal_intents("gpu") == []


def test_a_recorded_node_is_not_picked_again_and_a_gone_one_is_forgotten(tmp_path: Any, kube: FakeKube,
                                                                         hook: FakeHookServer) -> None:
    app, _ = make(tmp_path, kube, hook, tracks_count=False, count_url=hook.hook_url("/count"))
    left_by_a_killed_worker(app, kube, "gpunp-2", NOW - 100)
    store_of(app).intend_removals([RemovalIntent("gpu", "gpunp-9", DEAD, NOW - 100, 3)])  # gone from the cluster
    hook.then(Answer(body={"count": 3, "busy": True}), Answer(body={"count": 2}))
    scale_out(app)  # busy: gpunp-2 stays recorded; gpunp-9 is gone, forgotten
    assert [i.node for i in store_of(app).removal_intents("gpu")] == ["gpunp-2"]
    resp = post(app.test_client(), "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpunp-2"]})
    decision = resp.get_json()
    assert decision["outcome"] == "skipped_in_use", decision  # settled as sent by this very decision's sweep
    assert decision["reason"].endswith("no named node can go: gpunp-2: its removal was already asked of the cloud")
    assert not [c for c in hook.calls if c.method == "POST"]  # the node was never asked of the cloud again


def test_a_removal_records_its_nodes_before_the_call_and_clears_them_after(tmp_path: Any, kube: FakeKube,
                                                                          hook: FakeHookServer) -> None:
    app, _ = make(tmp_path, kube, hook)
    seen_during_call: list[list[str]] = []
    original = hook.handle

    def handle(request: Any) -> Any:  # the endpoint looks into the store while the call is open
        seen_during_call.append([i.node for i in store_of(app).removal_intents("gpu")])
        return original(request)

    hook.handle = handle  # type: ignore[method-assign]
    resp = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow")))
    assert resp.get_json()["decisions"][0]["outcome"] == "scaled"
    assert seen_during_call == [["gpunp-2"]]
    assert store_of(app).removal_intents("gpu") == []
    assert kube.nodes["gpunp-2"]["metadata"]["annotations"][CORDON_ANNOTATION].rpartition("@")[0].endswith(
        "/removing")


def test_a_refused_removal_clears_its_record_and_the_cordon(tmp_path: Any, kube: FakeKube,
                                                           hook: FakeHookServer) -> None:
    app, _ = make(tmp_path, kube, hook)
    hook.then(Answer(status=403, body={"error": "no"}))
    resp = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow")))
    assert resp.get_json()["decisions"][0]["outcome"] == "failed"
    assert store_of(app).removal_intents("gpu") == []
    assert all("unschedulable" not in n["spec"] for n in kube.nodes.values())


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    with pg.each_store(request.param, tmp_path) as made:
        yield made


def test_the_store_keeps_records_until_forgotten(store: Store) -> None:
    store.intend_removals([RemovalIntent("gpu", "n-2", "o:1", 20.0, 3), RemovalIntent("gpu", "n-1", "o:1", 10.0, 3),
                           RemovalIntent("cpu", "n-1", "o:2", 5.0, 1)])
    store.intend_removals([RemovalIntent("gpu", "n-2", "o:3", 30.0, 2)])  # a newer removal of the same node
    assert store.removal_intents("gpu") == [RemovalIntent("gpu", "n-1", "o:1", 10.0, 3),
                                            RemovalIntent("gpu", "n-2", "o:3", 30.0, 2)]
    store.forget_removals("gpu", ["n-1", "n-7"])
    assert [i.node for i in store.removal_intents("gpu")] == ["n-2"]
    assert [i.node for i in store.removal_intents("cpu")] == ["n-1"]
