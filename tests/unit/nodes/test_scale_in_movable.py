"""``victims: movable`` and the drain through the app: the real kubernetes client against the fake API server, the
webhook provider (which removes named nodes) against a receiver, the real store; a hand-moved clock."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.cluster.nodes import CORDON_ANNOTATION
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, post

LABELS = {"agentpool": "gpunp"}
NOW = 1_800_000_000.0


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    """Three 8-GPU nodes, each busy: a training Job on the oldest, an inference replica on each of the others."""
    with FakeKube() as fake:
        for i in range(3):
            fake.add_node(f"gpunp-{i}", LABELS, created=f"2026-11-0{i + 1}T00:00:00Z")
        fake.add_pod("train-7", "gpunp-0", gpus=4)  # owned by a Job
        fake.add_pod("infer-a", "gpunp-1", gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        fake.add_pod("infer-b", "gpunp-2", gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        fake.add_pod("dcgm-2", "gpunp-2", owner="DaemonSet", namespace="gpu-operator")
        yield fake


def make(tmp_path: Any, kube: FakeKube, url: str, clock: FakeClock | None = None, dry_run: bool = False,
         count: int = 3, **scale_in: Any) -> FlaskClient:
    clock = clock or FakeClock(NOW)

    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": url, "initial_count": count}, "scale_in": {"victims": "movable", **scale_in},
            "dry_run": dry_run}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
    return create_app(cfg, clock=clock, startup_check=False).test_client()


def scale_in(client: FlaskClient, fingerprint: str = "fp1") -> dict[str, Any]:
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow", fingerprint=fingerprint)))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def details(client: FlaskClient) -> dict[str, Any]:
    return client.get("/api/v1/events?limit=1", headers=AUTH).get_json()["events"][0]["details"]  # type: ignore


def test_a_node_of_movable_work_is_drained_and_removed_the_job_stays(tmp_path: Any, kube: FakeKube,
                                                                      receiver: WebhookReceiver) -> None:
    client = make(tmp_path, kube, receiver.url)
    kube.calls.clear()
    d = scale_in(client)
    assert d["outcome"] == "scaled" and (d["from"], d["to"]) == (3, 2), d
    assert [r.body["nodes"] for r in receiver.received] == [["gpunp-2"]]  # one replica, the newer of two
    assert ("ml", "infer-b") not in kube.pods and ("gpu-operator", "dcgm-2") in kube.pods  # DaemonSet's not evicted
    assert kube.nodes["gpunp-2"]["spec"]["unschedulable"] is True
    kept = {k["node"]: k["reason"] for k in details(client)["kept"]}
    assert kept["gpunp-0"] == ("pod ml/train-7 is owned by a Job (movable: ReplicaSet, StatefulSet): cannot move")
    assert kept["gpunp-1"] == "its pods could move, but one node with work goes per decision"
    assert kube.calls["CREATE eviction"] == 1 and kube.calls["LIST poddisruptionbudgets"] == 1
    assert kube.calls["LIST pods"] == 2  # the pool's pods once, the drained node's once


def test_a_budget_that_never_allows_the_eviction_keeps_the_node_uncordoned(tmp_path: Any, kube: FakeKube,
                                                                           receiver: WebhookReceiver) -> None:
    kube.pdb[("ml", "infer-b")] = 10**6  # the Eviction API refuses it for good (a budget the list does not show)
    kube.pdb[("ml", "infer-a")] = 10**6
    clock = FakeClock(NOW)
    client = make(tmp_path, kube, receiver.url, clock, drain_timeout="20s")
    d = scale_in(client)
    assert d["outcome"] == "failed" and (d["from"], d["to"]) == (3, 3)
    assert "gave up after drain_timeout 20s: GPU pod ml/infer-b blocks the drain" in d["reason"]
    assert "disruption budget" in d["reason"]
    node = kube.nodes["gpunp-2"]
    assert "unschedulable" not in node["spec"] and CORDON_ANNOTATION not in node["metadata"]["annotations"]
    assert ("ml", "infer-b") in kube.pods and receiver.received == [] and sum(clock.sleeps) >= 20


def test_a_budget_allowing_no_disruption_is_weighed_before_any_drain(tmp_path: Any, kube: FakeKube,
                                                                     receiver: WebhookReceiver) -> None:
    kube.add_budget("infer", {"app": "infer"}, allowed=0)
    client = make(tmp_path, kube, receiver.url)
    d = scale_in(client)
    assert d["outcome"] == "skipped_in_use"
    assert "gpunp-2: pod ml/infer-b: PodDisruptionBudget ml/infer allows no disruption now: cannot move" in d["reason"]
    assert kube.calls["CREATE eviction"] == 0 and kube.calls["PATCH nodes"] == 0


def test_pods_that_fit_nowhere_keep_their_node(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.add_pod("infer-c", "gpunp-1", gpus=7, owner="ReplicaSet")  # gpunp-1 is full
    kube.add_pod("infer-d", "gpunp-2", gpus=4, owner="StatefulSet")  # 5 on gpunp-2: gpunp-0 has 4 free
    client = make(tmp_path, kube, receiver.url)
    d = scale_in(client)
    assert d["outcome"] == "skipped_in_use"
    # infer-d's 4 GPUs take gpunp-0's last 4, then infer-b's 1 fits nowhere; gpunp-1's 7-GPU replica fits nowhere
    assert ("gpunp-2: pod ml/infer-b fits on none of the pool's 2 other nodes (gpunp-0: needs nvidia.com/gpu 1, "
            "0 free; gpunp-1: needs nvidia.com/gpu 1, 0 free)") in d["reason"]
    assert "gpunp-1: pod ml/infer-c fits on none of the pool's 2 other nodes" in d["reason"]
    assert kube.calls["PATCH nodes"] == 0


def test_force_drains_every_pod_and_respects_a_cpu_pods_budget(tmp_path: Any, kube: FakeKube,
                                                               receiver: WebhookReceiver) -> None:
    kube.add_pod("api", "gpunp-0", owner="ReplicaSet", labels={"app": "api"})  # a CPU pod beside the job
    kube.add_budget("api", {"app": "api"}, allowed=0)
    clock = FakeClock(NOW)
    client = make(tmp_path, kube, receiver.url, clock, drain_timeout="10s")
    resp = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpunp-0"], "force": True})
    d = resp.get_json()
    assert resp.status_code == 200 and d["outcome"] == "failed"
    assert "gave up after drain_timeout 10s: pod ml/api blocks the drain" in d["reason"]
    assert ("ml", "train-7") not in kube.pods and ("ml", "api") in kube.pods  # the job went, the budget held
    assert "unschedulable" not in kube.nodes["gpunp-0"]["spec"] and receiver.received == []
    del kube.budgets[("ml", "api")]
    resp = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpunp-0"], "force": True})
    assert resp.get_json()["outcome"] == "scaled" and receiver.received[0].body["nodes"] == ["gpunp-0"]
    assert kube.node_pods("gpunp-0") == []


def test_dry_run_names_the_node_it_would_drain(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    d = scale_in(make(tmp_path, kube, receiver.url, None, dry_run=True))
    assert (d["outcome"] == "dry_run"
            and "would remove gpunp-2 (draining gpunp-2 first: 1 pods would move)" in d["reason"])
    assert kube.calls["PATCH nodes"] == 0 and kube.calls["CREATE eviction"] == 0


HOSTNAME_ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "infer"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def spread_deployment(kube: FakeKube, job_gpus: int) -> None:
    """An inference Deployment with required anti-affinity on kubernetes.io/hostname: 3 replicas on 5 nodes, Jobs
    on the other 2 (``job_gpus`` of 8 each)."""
    for i in range(5):
        kube.add_node(f"gpunp-{i}", {**LABELS, "kubernetes.io/hostname": f"gpunp-{i}"},
                      created=f"2026-11-0{i + 1}T00:00:00Z")
    for i in range(3):
        kube.add_pod(f"infer-{i}", f"gpunp-{i}", gpus=1, owner="ReplicaSet", labels={"app": "infer"},
                     affinity=HOSTNAME_ANTI)
    for i in (3, 4):
        kube.add_pod(f"train-{i}", f"gpunp-{i}", gpus=job_gpus)


def test_replicas_spread_by_hostname_anti_affinity_move_to_a_node_without_one(tmp_path: Any,
                                                                                receiver: WebhookReceiver) -> None:
    with FakeKube() as kube:
        spread_deployment(kube, job_gpus=4)
        client = make(tmp_path, kube, receiver.url, None, count=5)
        d = scale_in(client)
        assert d["outcome"] == "scaled" and (d["from"], d["to"]) == (5, 4), d
        assert [r.body["nodes"] for r in receiver.received] == [["gpunp-2"]]  # the newest replica's node
        assert ("ml", "infer-2") not in kube.pods and kube.calls["CREATE eviction"] == 1
        kept = {k["node"]: k["reason"] for k in details(client)["kept"]}
        assert kept["gpunp-1"] == "its pods could move, but one node with work goes per decision"
        assert kept["gpunp-3"].startswith("pod ml/train-3 is owned by a Job")


def test_a_replica_whose_only_room_is_beside_another_replica_stays(tmp_path: Any, receiver: WebhookReceiver) -> None:
    with FakeKube() as kube:
        spread_deployment(kube, job_gpus=8)  # the Jobs' nodes are full: only replicas' nodes have room
        d = scale_in(make(tmp_path, kube, receiver.url, None, count=5))
        assert d["outcome"] == "skipped_in_use", d
        assert ("gpunp-2: pod ml/infer-2 fits on none of the pool's 4 other nodes (gpunp-0: required pod "
                "anti-affinity: ml/infer-0 runs in its kubernetes.io/hostname gpunp-0; gpunp-1: required pod "
                "anti-affinity: ml/infer-1 runs in its kubernetes.io/hostname gpunp-1; and 2 more)") in d["reason"]
        assert kube.calls["PATCH nodes"] == 0 and kube.calls["CREATE eviction"] == 0


def check(scale_in: dict[str, Any], kubernetes: bool = True) -> tuple[list[str], list[str], Any]:
    """(problems, warnings, the pool's spec) of a webhook pool with these ``scale_in`` settings."""
    from autoscaler.config.load import ConfigError, build_settings, warnings

    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": "http://127.0.0.1:9/hook"}, "scale_in": scale_in}
    raw = config("sqlite://", pools=[pool])
    if kubernetes:
        raw["kubernetes"] = {"host": "http://127.0.0.1:1", "token": "t"}
    try:
        settings = build_settings(raw)
    except ConfigError as exc:
        return exc.problems, [], None
    return [], warnings(settings), settings.pools["gpu"]


def test_config_movable_owners_and_what_movable_needs() -> None:
    problems, _, spec = check({"victims": "movable"})
    assert problems == [] and spec.movable_owners == ("ReplicaSet", "StatefulSet") and spec.victims == "movable"
    _, _, spec = check({"victims": "movable", "movable_owners": ["StatefulSet", "RayCluster"]})
    assert spec.movable_owners == ("StatefulSet", "RayCluster")
    problems, _, _ = check({"victims": "movable"}, kubernetes=False)
    assert problems == ["pools[0].scale_in.victims: movable needs the top-level `kubernetes:` section (the service "
                        "must see the pool's nodes and pods to pick them)"]
    problems, _, _ = check({"victims": "movable", "movable_owners": ["replica set"]})
    assert [p.split(":")[0] for p in problems] == ["pools[0].scale_in.movable_owners[0]"]
    _, warned, _ = check({"victims": "idle", "movable_owners": ["ReplicaSet"]})
    assert "pools[0].scale_in.movable_owners: does nothing with victims: idle (only victims: movable moves pods)" \
        in warned


def test_a_jobs_pods_never_become_movable_by_config() -> None:
    """A Job's pod is run-to-completion work (a training step): evicting it throws the work away, which is what
    `movable` promises never to do (README: "a Job's, a bare pod and any other kind keep their node")."""
    problems, _, _ = check({"victims": "movable", "movable_owners": ["ReplicaSet", "Job"]})
    assert [p.split(":")[0] for p in problems] == ["pools[0].scale_in.movable_owners[1]"]
    assert "a Job's pods are never moved" in problems[0]
