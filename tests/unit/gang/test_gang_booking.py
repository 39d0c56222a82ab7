"""A booking's end and its loss, and a waiting gang's nodes, through the app, the real kubernetes client and the
fake API server: a booked node's mark comes off once a pod of the request (annotated
``autoscaling.x-k8s.io/consume-provisioning-request``, or the older ``cluster-autoscaler.kubernetes.io/`` key) runs
on it; a booked node lost (gone, or NotReady for 5 minutes) marks the request CapacityRevoked and the event log says
so; an idle scale-in while a gang waits takes none of its nodes."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, Rig, pools
from tests.support import AUTH, events, post

PRS = {"provisioning_requests": {"booking": "10m"}}
BOOKED = "gpu-autoscaler/booked-for"
CONSUMES = "autoscaling.x-k8s.io/consume-provisioning-request"
OLD_CONSUMES = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"


def _provisioned(rig: Rig, kube: FakeKube, name: str = "job-b") -> list[str]:
    """A request of 2 nodes provisioned on the spot pool (its capacity, 2, holds them); the nodes."""
    kube.prs.add_template(f"{name}-tmpl", gpus=8, node_selector=dict(H100))
    kube.prs.add_request(name, [(f"{name}-tmpl", 2)])
    assert rig.tick() == [("spot", "scaled")]
    came = rig.arrive("spot")
    assert rig.tick() == [("spot", "provisioned")]
    assert [kube.nodes[n]["metadata"]["annotations"].get(BOOKED) for n in came] == [f"ml/{name}"] * 2
    return came


def _marks(kube: FakeKube, names: list[str]) -> list[str | None]:
    return [kube.nodes[n]["metadata"]["annotations"].get(BOOKED) for n in names if n in kube.nodes]


def test_a_booked_node_is_released_once_a_pod_of_the_request_runs_on_it(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        first, second = _provisioned(rig, kube)
        kube.add_pod("job-b-0", first, gpus=8, annotations={CONSUMES: "job-b"})
        kube.add_pod("other-0", second, namespace="team-x", gpus=8, annotations={CONSUMES: "job-b"})  # not its ns
        before = len(kube.log)
        rig.tick()
        assert _marks(kube, [first, second]) == [None, "ml/job-b"]
        patches = [p for m, p in kube.log[before:] if m == "PATCH"]
        assert patches == [f"/api/v1/nodes/{first}"]  # the mark taken off; the pods read from the pool's listing
        kube.add_pod("job-b-1", second, gpus=8, annotations={OLD_CONSUMES: "job-b"})  # the older key, as Kueue <0.14
        rig.tick()
        assert _marks(kube, [first, second]) == [None, None]
        shown = rig.client.get("/api/v1/pools/spot", headers=AUTH).get_json()["nodes"]
        assert all("booked" not in (n["why"] or "") for n in shown), shown
        assert "CapacityRevoked" not in kube.prs.conditions("job-b")
        del kube.pods[("ml", "job-b-0")]  # a released node lost later: the request's pods had it, nothing revoked
        del kube.nodes[first]
        rig.tick()
        assert "CapacityRevoked" not in kube.prs.conditions("job-b")


def test_a_booked_node_gone_revokes_the_capacity(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        first, second = _provisioned(rig, kube)
        del kube.nodes[second]  # the spot VM was taken back before the request's pods came
        assert rig.tick() == [("spot", "capacity_revoked")]
        revoked = kube.prs.condition("job-b", "CapacityRevoked")
        assert revoked["status"] == "True" and revoked["reason"] == "NodeLost" and second in revoked["message"]
        said = events(rig.client, pool="spot")[0]
        assert said["outcome"] == "capacity_revoked" and said["details"]["request"] == "ml/job-b"
        assert said["details"]["lost"] == [second]
        assert _marks(kube, [first]) == [None]  # the rest of its booking ends with it
        later = rig.tick() + rig.tick(600)  # (the cloud still counts the lost node: the capacity check's to settle)
        assert ("spot", "capacity_revoked") not in later  # once, and no BookingExpired after
        assert "BookingExpired" not in kube.prs.conditions("job-b")


def _not_ready(kube: FakeKube, node: str, since: float) -> None:
    kube.nodes[node]["status"]["conditions"][0].update(
        status="False", lastTransitionTime=datetime.fromtimestamp(since, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_a_booked_node_not_ready_past_the_grace_revokes_the_capacity(tmp_path: Path) -> None:
    """NotReady for NOT_READY_GRACE (300 s, Kubernetes' default toleration of node.kubernetes.io/not-ready before
    it evicts the node's pods) revokes the capacity; a blip shorter than that (a kubelet that missed its heartbeats
    for a few minutes) does not: before, the first tick that saw it NotReady revoked, and the request's job lost its
    booking to a blip. The time is the Ready condition's lastTransitionTime, not when a tick first saw it."""
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, provisioning_requests={"booking": "1h"})
        first, second = _provisioned(rig, kube)
        _not_ready(kube, first, rig.clock())
        assert rig.tick(after=240) == []
        assert "CapacityRevoked" not in kube.prs.conditions("job-b")
        assert _marks(kube, [first, second]) == ["ml/job-b"] * 2
        assert rig.tick(after=60) == [("spot", "capacity_revoked")]
        assert kube.prs.condition("job-b", "CapacityRevoked")["reason"] == "NodeLost"
        said = events(rig.client, pool="spot")[0]
        assert f"{first} (NotReady for 300s)" in said["reason"], said
        assert _marks(kube, [first, second]) == [None, None]


def test_a_booked_node_not_ready_for_long_when_first_seen_revokes_at_once(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, provisioning_requests={"booking": "1h"})
        first, _ = _provisioned(rig, kube)
        _not_ready(kube, first, rig.clock() - 280)
        assert rig.tick(after=20) == [("spot", "capacity_revoked")]


def test_a_booked_node_not_ready_since_an_unknown_time_revokes_at_once(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        first, _ = _provisioned(rig, kube)
        kube.nodes[first]["status"]["conditions"][0]["status"] = "False"  # no lastTransitionTime
        assert rig.tick() == [("spot", "capacity_revoked")]
        assert kube.prs.condition("job-b", "CapacityRevoked")["reason"] == "NodeLost"


def test_an_idle_scale_in_takes_none_of_a_waiting_gangs_nodes(tmp_path: Path) -> None:
    spot, ondemand = pools(spot_capacity=None)
    spot["simulated"] = {"nodes": ["spot-old"]}  # one idle node from before the gang
    with FakeKube() as kube:
        kube.add_node("spot-old", {"pool": "spot", **H100}, created="2026-11-01T00:00:00Z")
        rig = Rig(tmp_path, kube, pools=[spot, ondemand])
        assert rig.atomic("spot", 2).get_json()["outcome"] == "scaled"
        came = rig.arrive("spot", ready=False)  # registered, not GPU-ready yet: the gang waits
        assert sorted(came) == ["spot-node-0002", "spot-node-0003"] or len(came) == 3, came
        came = [n for n in came if n != "spot-old"]
        assert rig.tick() == []
        got = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_in", "step": 3, "force": True}).get_json()
        assert got["outcome"] == "scaled" and (got["from"], got["to"]) == (3, 2), got
        said = events(rig.client, pool="spot")[0]["details"]
        assert said["nodes"] == ["spot-old"], said
        kept = {k["node"]: k["reason"] for k in said["kept"]}
        assert sorted(kept) == sorted(came) and all("atomic scale-out" in r for r in kept.values()), kept
        assert all(n in rig.provider("spot").node_names() for n in came)
        shown = rig.client.get("/api/v1/pools/spot", headers=AUTH).get_json()["nodes"]
        assert {n["name"]: n["removable"] for n in shown if n["name"] in came} == {n: False for n in came}


def test_a_node_that_came_and_went_not_ready_later_is_no_shortfall(tmp_path: Path) -> None:
    """A node Ready with GPUs that goes NotReady well after it came (a kubelet's blip) was delivered: before, the
    first tick past provision_time that saw it NotReady recorded the pool short (no_capacity, NodesNotReadyInTime),
    asked the group's next pool for a node and passed the pool over for 10 minutes."""
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        got = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_out", "step": 2}).get_json()
        assert got["outcome"] == "scaled", got
        came = rig.arrive("spot")
        assert rig.tick(after=700) == []
        _not_ready(kube, came[0], rig.clock())
        assert rig.tick() == []
        assert rig.current("ondemand") == 0


def test_a_scale_in_by_size_waits_while_a_gang_waits_on_the_pool(tmp_path: Path) -> None:
    """A scale-in the cloud carries out by size (victims: cloud, the cloud picks the machine) of a pool an atomic
    scale-out waits on is skipped_busy until the gang is settled: the cloud could take a node that came for the
    gang, which then waited for its deadline or the cloud's shortfall (a named scale-in already passes the gang's
    nodes over). Once the gang is settled it goes ahead."""
    spot, ondemand = pools(spot_capacity=None)
    spot["scale_in"] = {"victims": "cloud"}
    spot["simulated"] = {"initial_count": 1}
    with FakeKube() as kube:
        kube.add_node("spot-node-0000", {"pool": "spot", **H100})
        rig = Rig(tmp_path, kube, pools=[spot, ondemand])
        assert rig.atomic("spot", 2).get_json()["outcome"] == "scaled"
        rig.arrive("spot", ready=False)
        got = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_in", "step": 1, "force": True}).get_json()
        assert got["outcome"] == "skipped_busy" and "atomic scale-out" in got["reason"], got
        assert rig.current("spot") == 3
        rig.arrive("spot")
        for name in rig.provider("spot").node_names():
            kube.nodes[name]["status"]["conditions"][0]["status"] = "True"
        assert rig.tick() == [("spot", "provisioned")]
        got = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_in", "step": 1, "force": True}).get_json()
        assert got["outcome"] == "scaled" and (got["from"], got["to"]) == (3, 2), got
