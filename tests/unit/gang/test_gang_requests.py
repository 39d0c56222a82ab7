"""ProvisioningRequests served all or nothing, through the app, the real kubernetes client and the fake API server
(requests, their /status subresource with resourceVersion conflicts, PodTemplates): the spot pool asked for all at
once, the nodes that came removed by name and its size restored, the on-demand pool asked next and Provisioned=True
only once all are GPU-ready; booked nodes survive a scale-in until the booking ends; a request too large Failed
with nothing asked; other classes untouched."""
from __future__ import annotations

from pathlib import Path

from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, Rig
from tests.support.rbac import asked, expected
from tests.support import AUTH, post
from tests.support.statements import recorded

PRS = {"provisioning_requests": {"booking": "10m"}}


def _train(kube: FakeKube, name: str, pods: int, **template: object) -> None:
    kube.prs.add_template(f"{name}-tmpl", gpus=8, node_selector=dict(H100), **template)  # type: ignore[arg-type]
    kube.prs.add_request(name, [(f"{name}-tmpl", pods)])


def test_the_spot_pool_falls_short_then_on_demand_provisions_it(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        _train(kube, "job-a", 4)
        kube.prs.conflicts = 1  # another writer changes the request between our read and our write
        assert rig.tick() == [("spot", "scaled")]
        assert rig.provider("spot").asked() == 4
        # read again, not overwritten
        assert kube.prs.conditions("job-a") == {"SomeoneElse": "True", "Accepted": "True"}
        came = rig.arrive("spot")  # 2 of 4, and the cloud says it cannot deliver the rest: rolled back at once
        assert rig.tick() == [("spot", "rolled_back"), ("ondemand", "scaled")]
        assert "Provisioned" not in kube.prs.conditions("job-a")
        assert rig.provider("spot").node_names() == () and rig.provider("spot").asked() == 0
        assert all(name in kube.nodes for name in came)  # the fake cluster keeps them: the cloud removed the machines
        rig.arrive("ondemand", only=3)
        assert rig.tick() == [] and "Provisioned" not in kube.prs.conditions("job-a")
        rig.arrive("ondemand")
        assert rig.tick() == [("ondemand", "provisioned")]
        assert kube.prs.conditions("job-a")["Provisioned"] == "True"
        booked = [n for n, node in kube.nodes.items() if node["metadata"]["annotations"].get(
            "gpu-autoscaler/booked-for") == "ml/job-a"]
        assert sorted(booked) == sorted(rig.provider("ondemand").node_names())
        # every call made is one docs/rbac.md grants with provisioning_requests: (the chart renders the same rows)
        assert asked(kube.log) <= expected({"kubernetes", "provisioning_requests"})
        assert ("autoscaling.x-k8s.io", "provisioningrequests/status", "update") in asked(kube.log)


def test_booked_nodes_survive_a_scale_in_until_the_booking_ends(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        _train(kube, "job-b", 2)
        rig.tick()  # spot asked for 2: its capacity (2) holds them
        rig.arrive("spot")
        assert rig.tick() == [("spot", "provisioned")]
        answer = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_in", "step": 2, "force": True})
        got = answer.get_json()
        assert got["outcome"] == "skipped_in_use", got
        assert "booked for ProvisioningRequest ml/job-b" in got["reason"]
        assert rig.tick(1) == []  # the stored node view (what the API and the page show) read again
        shown = rig.client.get("/api/v1/pools/spot", headers=AUTH).get_json()["nodes"]
        assert [(n["name"], n["removable"], n["why"]) for n in shown] == [
            (name, False, "booked for ProvisioningRequest ml/job-b") for name in ("spot-node-0001", "spot-node-0002")]
        rig.tick(600)  # the booking (10m) ends
        assert kube.prs.conditions("job-b")["BookingExpired"] == "True"
        assert not any(n["metadata"]["annotations"].get("gpu-autoscaler/booked-for") for n in kube.nodes.values())
        gone = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_in", "step": 2, "force": True})
        assert gone.get_json()["outcome"] == "scaled" and rig.provider("spot").node_names() == ()


def test_too_large_or_unmatched_fails_with_nothing_asked_and_other_classes_are_left_alone(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        _train(kube, "too-big", 9)  # 9 nodes: over both pools' max (8)
        kube.prs.add_template("other-tmpl", gpus=8, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100"})
        kube.prs.add_request("no-match", [("other-tmpl", 1)])
        kube.prs.add_request("not-ours", [("too-big-tmpl", 1)], class_name="check-capacity.autoscaling.x-k8s.io")
        assert rig.tick() == []
        assert kube.prs.conditions("too-big") == {"Failed": "True"}
        assert kube.prs.condition("too-big", "Failed")["reason"] == "OverMax"
        assert kube.prs.condition("no-match", "Failed")["reason"] == "NoPoolMatches"
        assert kube.prs.conditions("not-ours") == {}
        assert rig.provider("spot").asked() == 0 and rig.provider("ondemand").asked() == 0
        before = dict(kube.prs.calls)
        assert rig.tick() == []
        assert {k: v - before.get(k, 0) for k, v in kube.prs.calls.items() if v != before.get(k, 0)} == {
            "LIST provisioningrequests": 1}  # finished requests cost nothing more than the list


def _cost(tmp_path: Path, requests: int) -> tuple[int, int]:
    """API calls of the first tick over ``requests`` new requests (each too large: a template read and a status
    write) and of the next tick (all finished)."""
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        kube.prs.add_template("big", gpus=8, node_selector=dict(H100))
        for i in range(requests):
            kube.prs.add_request(f"r{i}", [("big", 9)])
        start = len(kube.log)
        rig.tick()
        first = len(kube.log) - start
        rig.tick()
        return first, len(kube.log) - start - first


def test_what_a_tick_costs(tmp_path: Path) -> None:
    none, ten, many = (_cost(tmp_path / str(n), n) for n in (0, 10, 500))
    base = none[1]  # the pools' own reads (node and pod lists) and one list of requests, however many there are
    assert none[0] == base
    assert ten == (base + 2 * 10, base)  # a new request: its PodTemplate read and its status written, once
    assert many == (base + 2 * 500, base)
    print(f"API calls a tick: 0 requests {none}, 10 {ten}, 500 {many} (first tick, next tick)")


def test_requests_waiting_for_room_cost_no_template_read_and_one_cloud_read_a_pool(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        for i in range(20):
            kube.prs.add_template(f"t{i}", gpus=8, node_selector=dict(H100))
            kube.prs.add_request(f"r{i}", [(f"t{i}", 1)])
        for pool in ("spot", "ondemand"):  # both pools could hold each request, but not now
            assert post(rig.client, f"/api/v1/pools/{pool}/pause", {"reason": "test"}).status_code == 200
        assert rig.tick() == []  # each template read once
        calls, reads = dict(kube.prs.calls), [rig.provider(p).reads for p in ("spot", "ondemand")]
        assert rig.tick() == []
        assert kube.prs.calls["GET podtemplates"] == calls["GET podtemplates"]  # unchanged requests: not read again
        assert [rig.provider(p).reads - r for p, r in zip(("spot", "ondemand"), reads)] == [1, 1]  # one a pool
        # and the store: as many statements a tick for 40 waiting requests as for 20 (each pool's state and the
        # waiting gangs read once for all the requests' pre-checks; before: 8 statements more a request)
        twenty = _statements_a_tick(rig)
        for i in range(20, 40):
            kube.prs.add_request(f"r{i}", [("t1", 1)])
        rig.tick()  # the new ones sized
        assert _statements_a_tick(rig) == twenty
        calls = dict(kube.prs.calls)
        kube.prs.add_template("t0", gpus=8, node_selector=dict(H100))  # the same template written again ...
        kube.prs.add_request("r0", [("t0", 2)])  # ... and the request (a new resourceVersion): sized again
        assert rig.tick() == [] and kube.prs.calls["GET podtemplates"] == calls["GET podtemplates"] + 1
        for pool in ("spot", "ondemand"):
            assert post(rig.client, f"/api/v1/pools/{pool}/resume", {}).status_code == 200
        assert rig.tick() == [("spot", "scaled"), ("ondemand", "scaled")]  # r0 of 2 nodes, r1: one pool each
        assert rig.provider("spot").asked() == 2


def _statements_a_tick(rig: Rig) -> int:
    """The SQL statements one reconciler tick sends to the rig's store."""
    with recorded(rig.app.extensions["autoscaler"].store.engine) as sent:
        rig.tick()
    return len(sent)
