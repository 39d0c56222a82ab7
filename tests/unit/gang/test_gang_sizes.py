"""How many nodes a request gets, and whose they are, through the app, the real kubernetes client and the fake API
server: GPUs per pod read from a DRA claim template; two requests on one pool never mix their nodes (the second is
asked elsewhere, or after the first is settled); a group's members of different ``gpus_per_node`` each asked for
their own count."""
from __future__ import annotations

from pathlib import Path

from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, PROVISION, Rig, pools
from tests.support.rbac import asked, expected

PRS = {"provisioning_requests": {"booking": "10m"}}
BOOKED = "gpu-autoscaler/booked-for"


def _train(kube: FakeKube, name: str, pods: int, gpus: int = 8) -> None:
    kube.prs.add_template(f"{name}-tmpl", gpus=gpus, node_selector=dict(H100))
    kube.prs.add_request(name, [(f"{name}-tmpl", pods)])


def _booked(kube: FakeKube, request: str) -> list[str]:
    return sorted(n for n, node in kube.nodes.items() if node["metadata"]["annotations"].get(BOOKED) == request)


def test_gpus_per_pod_from_a_dra_claim_template(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, **PRS)
        kube.dra.add_claim_template("two-gpus", requests=[("gpu.nvidia.com", 2)])
        kube.prs.add_template("dra-tmpl", node_selector=dict(H100), claim_template="two-gpus")
        kube.prs.add_request("job-dra", [("dra-tmpl", 8)])  # 8 pods of 2 GPUs: 16 GPUs, 2 nodes of 8
        assert rig.tick() == [("spot", "scaled")]
        assert rig.provider("spot").asked() == 2
        assert kube.calls["GET resourceclaimtemplates"] == 1
        kube.dra.add_claim_template("cpu-only", requests=[("cpu.example.com", 1)])  # no GPU class: no GPU asked
        kube.prs.add_template("cpu-tmpl", node_selector=dict(H100), claim_template="cpu-only")
        kube.prs.add_request("job-cpu", [("cpu-tmpl", 1)])
        rig.tick()
        assert kube.prs.condition("job-cpu", "Failed")["reason"] == "NoGPUsAsked"
        assert asked(kube.log) <= expected({"kubernetes", "provisioning_requests"})


def test_two_requests_on_one_pool_never_mix_their_nodes(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=pools(spot_capacity=None), **PRS)
        _train(kube, "job-a", 2)
        _train(kube, "job-b", 3)
        assert rig.tick() == [("spot", "scaled"), ("ondemand", "scaled")]  # spot has a gang waiting: b goes on
        assert (rig.provider("spot").asked(), rig.provider("ondemand").asked()) == (2, 3)
        rig.arrive("spot")
        rig.arrive("ondemand")
        assert sorted(rig.tick()) == [("ondemand", "provisioned"), ("spot", "provisioned")]
        assert _booked(kube, "ml/job-a") == sorted(rig.provider("spot").node_names())
        assert _booked(kube, "ml/job-b") == sorted(rig.provider("ondemand").node_names())


def test_a_second_request_on_a_lone_pool_waits_for_the_first(tmp_path: Path) -> None:
    spot, _ = pools(spot_capacity=None)
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=[spot], groups=[], **PRS)
        _train(kube, "job-a", 2)
        _train(kube, "job-b", 3)
        assert rig.tick() == [("spot", "scaled")]
        assert rig.provider("spot").asked() == 2 and kube.prs.conditions("job-b") == {}
        first = rig.arrive("spot")
        assert rig.tick() == [("spot", "provisioned"), ("spot", "scaled")]  # a settled, then b asked
        assert rig.provider("spot").asked() == 5
        assert _booked(kube, "ml/job-a") == sorted(first)
        rig.arrive("spot")
        assert rig.tick() == [("spot", "provisioned")]
        assert _booked(kube, "ml/job-b") == sorted(set(rig.provider("spot").node_names()) - set(first))


def test_each_group_member_is_asked_for_its_own_node_count(tmp_path: Path) -> None:
    spot, ondemand = pools(spot_capacity=2)
    ondemand["gpus_per_node"] = 4  # smaller nodes: twice as many for the same pods
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=[spot, ondemand], **PRS)
        _train(kube, "job-c", 8, gpus=4)  # 8 pods of 4 GPUs: 4 nodes of 8, or 8 nodes of 4
        assert rig.tick() == [("spot", "scaled")]
        assert rig.provider("spot").asked() == 4
        rig.arrive("spot")  # 2 of 4
        assert rig.tick(PROVISION) == [("spot", "rolled_back"), ("ondemand", "scaled")]
        assert rig.provider("ondemand").asked() == 8
        assert kube.prs.conditions("job-c") == {"Accepted": "True"}
