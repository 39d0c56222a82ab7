"""ProvisioningRequests with several clusters (``clusters:``): each cluster's requests listed once a tick with its
own deadline and served only by that cluster's pools; a cluster whose API hangs stalls only its own requests. The
real kubernetes client against two fake API servers."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, Rig, pools

PRS = {"provisioning_requests": {"booking": "10m"}}


def _fleet(weu: FakeKube, eus: FakeKube) -> dict[str, Any]:
    spot, ondemand = pools(spot_capacity=None, spot_max=4)
    spot["cluster"], ondemand["cluster"] = "weu", "eus"  # one group across the two clusters
    return {"clusters": [{"name": "weu", "host": weu.url, "token": weu.token, "timeout": "1s"},
                         {"name": "eus", "host": eus.url, "token": eus.token, "timeout": "1s"}],
            "pools": [spot, ondemand], **PRS}


def _train(kube: FakeKube, name: str, pods: int) -> None:
    kube.prs.add_template(f"{name}-tmpl", gpus=8, node_selector=dict(H100))
    kube.prs.add_request(name, [(f"{name}-tmpl", pods)])


def test_each_clusters_requests_are_served_by_its_own_pools(tmp_path: Path) -> None:
    with FakeKube() as weu, FakeKube() as eus:
        rig = Rig(tmp_path, weu, **_fleet(weu, eus))
        _train(weu, "job-w", 2)
        _train(eus, "job-e", 3)
        got = sorted(rig.tick())
        assert got == [("ondemand", "scaled"), ("spot", "scaled")], got
        assert (rig.provider("spot").asked(), rig.provider("ondemand").asked()) == (2, 3)
        assert weu.prs.conditions("job-w") == {"Accepted": "True"}
        assert eus.prs.conditions("job-e") == {"Accepted": "True"}
        assert (weu.prs.calls["LIST provisioningrequests"], eus.prs.calls["LIST provisioningrequests"]) == (1, 1)
        for name in rig.provider("ondemand").node_names():
            eus.add_node(name, {"pool": "ondemand", **H100})
        assert rig.tick() == [("ondemand", "provisioned")]
        assert eus.prs.conditions("job-e")["Provisioned"] == "True"
        assert all(node["metadata"]["annotations"].get("gpu-autoscaler/booked-for") == "ml/job-e"
                   for node in eus.nodes.values())


def test_a_request_is_never_asked_of_another_clusters_pool(tmp_path: Path) -> None:
    with FakeKube() as weu, FakeKube() as eus:
        rig = Rig(tmp_path, weu, **_fleet(weu, eus))
        _train(weu, "job-big", 6)  # over spot's max (4); ondemand (eus, max 8) could hold it, but it is not in weu
        assert rig.tick() == []
        assert weu.prs.condition("job-big", "Failed")["reason"] == "OverMax"
        assert rig.provider("ondemand").asked() == 0


def test_a_hung_cluster_stalls_only_its_own_requests(tmp_path: Path) -> None:
    with FakeKube() as weu, FakeKube() as eus:
        rig = Rig(tmp_path, weu, **_fleet(weu, eus))
        _train(weu, "job-w", 2)
        _train(eus, "job-e", 2)
        weu.hung.set()  # the first cluster's API hangs
        try:
            start = time.monotonic()
            got = rig.tick()
            took = time.monotonic() - start
        finally:
            weu.hung.clear()
        assert got == [("ondemand", "scaled")], got
        assert took < 5, took
        assert eus.prs.conditions("job-e") == {"Accepted": "True"}
        assert rig.provider("spot").asked() == 0
        assert sorted(rig.tick()) == [("spot", "scaled")]  # back: its request is served at the next tick
