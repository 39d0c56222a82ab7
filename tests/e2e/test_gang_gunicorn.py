"""All or nothing under gunicorn (issue 48's done-when): the real service, the real kubernetes client against the fake
API server serving ProvisioningRequests and PodTemplates, and a simulated cloud whose spot pool delivers at most 2
nodes of any size asked. The nodes the cloud made register in the fake cluster when the test says so (the simulated
cloud names them ``<pool>-node-0001``, ``-0002``, … in each process); the reconciler ticks every second on the wall
clock, the spot pool's provision_time is 2 s (a short gang rolls back within seconds), the on-demand pool's 30 s."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import AUTH
from tests.support.cloud_stack import service_config
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.kube_requests import ATOMIC
from tests.support.pipeline import wait_for
from tests.support.servers import Service

pytestmark = pytest.mark.slow
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
SPOT_TIME, ONDEMAND_TIME = 2, 30


def pool(name: str, provision_time: int, **simulated: Any) -> dict[str, Any]:
    return {"name": name, "provider": "simulated", "min": 0, "max": 8, "node_selector": f"pool={name}",
            "node_labels": H100, "gpus_per_node": 8, "provision_time": f"{provision_time}s",
            "simulated": {"initial_count": 0, **simulated}}


def config(tmp_path: Path, kube: FakeKube) -> dict[str, Any]:
    cfg = service_config(tmp_path, [pool("spot", SPOT_TIME, capacity=2), pool("ondemand", ONDEMAND_TIME)], [],
                         groups=[{"name": "h100", "pools": ["spot", "ondemand"]}],
                         kubernetes={"host": kube.url, "token": kube.token, "timeout": "2s"},
                         provisioning_requests={"booking": "10m"})
    cfg["server"]["reconcile_interval"] = "1s"
    return cfg


def events(url: str, pool: str | None = None) -> list[dict[str, Any]]:
    """The pool's (or every) event, oldest first."""
    query = f"?limit=500&pool={pool}" if pool else "?limit=500"
    found = requests.get(f"{url}/api/v1/events{query}", headers=AUTH, timeout=10).json()["events"]
    return list(reversed(found))


def outcomes(url: str, pool: str) -> list[str]:
    return [e["outcome"] for e in events(url, pool)]


def current(url: str, pool: str) -> int:
    return requests.get(f"{url}/api/v1/pools/{pool}", headers=AUTH, timeout=10).json()["current"]  # type: ignore


def arrive(kube: FakeKube, pool: str, numbers: range, ready: bool = True) -> list[str]:
    """The cloud's machines of ``pool`` register as Nodes (8 GPUs each, the pool's labels)."""
    names = [f"{pool}-node-{i:04d}" for i in numbers]
    for name in names:
        kube.add_node(name, {"pool": pool, **H100}, ready=ready)
    return names


def gone(kube: FakeKube, names: list[str]) -> None:
    """Machines the cloud removed leave the cluster."""
    for name in names:
        kube.nodes.pop(name, None)


def atomic(url: str, name: str, step: int) -> dict[str, Any]:
    """The atomic scale-out by hand, whenever it comes in the reconciler's tick (the simulated cloud never renames
    its machines, even for a read passed the count from before the ask)."""
    resp = requests.post(f"{url}/api/v1/pools/{name}/scale", headers=AUTH, timeout=30,
                         json={"action": "scale_out", "step": step, "atomic": True, "reason": "e2e gang"})
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def settled(url: str, gang: str) -> list[str]:
    """What became of one gang: its provisioned and rolled_back events."""
    return [e["outcome"] for e in events(url) if (e.get("details") or {}).get("gang") == gang
            and e["outcome"] in ("provisioned", "rolled_back")]


def test_all_or_nothing_under_gunicorn(tmp_path: Path) -> None:
    with FakeKube() as kube:
        kube.prs.add_template("train", gpus=8, node_selector=dict(H100))
        kube.prs.add_request("job-a", [("train", 4)])  # 4 nodes: the spot pool delivers 2
        kube.prs.add_request("too-big", [("train", 9)])  # over both pools' max (8)
        kube.prs.add_request("not-ours", [("train", 1)], class_name="check-capacity.autoscaling.x-k8s.io")
        # graceful_timeout above the reconciler's 2 s join in worker_exit: a worker killed before it gives up the
        # reconciler's lease leaves it to expire (60 s): the hard-kill case, not the restart this test is about
        svc = Service(config(tmp_path, kube), tmp_path, workers=1, graceful_timeout=5).start()
        try:
            requests_served(svc, kube)
            by_hand(svc, kube)
            restarts(svc, kube)
        finally:
            svc.stop()


def requests_served(svc: Service, kube: FakeKube) -> None:
    """job-a: spot asked for all 4 at once, its 2 removed by name and its size back, on-demand asked next and
    Provisioned only once its 4 are Ready; too-big Failed with nothing asked; not-ours left alone."""
    wait_for(lambda: kube.prs.conditions("job-a").get("Accepted") == "True", 15, "job-a Accepted")
    asked = [e for e in events(svc.url, "spot") if e["outcome"] == "scaled"]
    assert [(e["from"], e["to"], e["details"]["nodes_asked"]) for e in asked] == [(0, 4, 4)]  # all at once
    came = arrive(kube, "spot", range(1, 3))
    back = wait_for(lambda: [e for e in events(svc.url, "spot") if e["outcome"] == "rolled_back"],
                    SPOT_TIME + 10, "the short spot gang rolled back")
    gone(kube, came)
    assert back[0]["details"]["nodes"] == came and back[0]["to"] == 0  # removed by name, size back
    assert current(svc.url, "spot") == 0
    wait_for(lambda: "scaled" in outcomes(svc.url, "ondemand"), 10, "the on-demand pool asked next")
    [ondemand] = [e for e in events(svc.url, "ondemand") if e["outcome"] == "scaled"]
    assert (ondemand["from"], ondemand["to"], ondemand["details"]["request"]) == (0, 4, "ml/job-a")
    arrive(kube, "ondemand", range(1, 4))
    arrive(kube, "ondemand", range(4, 5), ready=False)  # the fourth is not Ready yet
    time.sleep(2.2)  # two ticks and more
    assert "Provisioned" not in kube.prs.conditions("job-a")
    assert "provisioned" not in outcomes(svc.url, "ondemand")
    arrive(kube, "ondemand", range(4, 5))
    wait_for(lambda: kube.prs.conditions("job-a").get("Provisioned") == "True", 10, "job-a Provisioned")
    assert outcomes(svc.url, "ondemand") == ["scaled", "provisioned"]
    assert current(svc.url, "ondemand") == 4 and current(svc.url, "spot") == 0
    everything = events(svc.url)
    assert kube.prs.conditions("too-big") == {"Failed": "True"}
    assert kube.prs.condition("too-big", "Failed")["reason"] == "OverMax"
    assert not [e for e in everything if (e.get("details") or {}).get("request") == "ml/too-big"]  # nothing asked
    assert kube.prs.conditions("not-ours") == {}  # another class: left alone
    assert kube.prs.requests[("ml", "not-ours")]["spec"]["provisioningClassName"] != ATOMIC
    assert [e["outcome"] for e in everything] == ["scaled", "rolled_back", "scaled", "provisioned"], everything


def by_hand(svc: Service, kube: FakeKube) -> None:
    """3 asked of spot at once by hand, 2 came: both removed by name, the size back to 0, no other pool asked."""
    first = atomic(svc.url, "spot", 3)
    assert (first["outcome"], first["from"], first["to"]) == ("scaled", 0, 3), first
    came = arrive(kube, "spot", range(3, 5))  # the process's next names (its first two were removed)
    back = wait_for(lambda: [e for e in events(svc.url, "spot") if e["outcome"] == "rolled_back"][1:],
                    SPOT_TIME + 10, "the manual gang rolled back")
    gone(kube, came)
    assert back[0]["details"]["nodes"] == came and back[0]["source"] == "reconcile"
    assert current(svc.url, "spot") == 0
    assert outcomes(svc.url, "ondemand") == ["scaled", "provisioned"]  # a pool, not a group: no next pool


def restarts(svc: Service, kube: FakeKube) -> None:
    """A restart while a gang waits: carried on by the new worker (provisioned) or rolled back, never both."""
    assert atomic(svc.url, "ondemand", 2)["to"] == 6
    done = [e for e in events(svc.url, "ondemand") if e["outcome"] == "scaled"][-1]["details"]["gang"]
    svc.restart()
    arrive(kube, "ondemand", range(5, 7))  # the new process names the count's nodes as the old one did
    wait_for(lambda: settled(svc.url, done), 10, "the gang carried on after the restart")

    assert atomic(svc.url, "spot", 2)["to"] == 2
    short = [e for e in events(svc.url, "spot") if e["outcome"] == "scaled"][-1]["details"]["gang"]
    deadline = time.monotonic() + SPOT_TIME
    svc.stop()
    time.sleep(max(0.0, deadline - time.monotonic()))  # the deadline passes while no worker runs, nothing came
    svc.start()
    wait_for(lambda: settled(svc.url, short), 10, "the gang rolled back after the restart")
    time.sleep(1.1)  # a tick more: nothing else becomes of either gang
    assert settled(svc.url, done) == ["provisioned"]
    assert settled(svc.url, short) == ["rolled_back"]
    assert current(svc.url, "ondemand") == 6 and current(svc.url, "spot") == 0
