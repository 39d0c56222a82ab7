"""Issue 45 item 4: a Kubernetes API server that trickles its answer (a byte every 0.5 s) is cut at
``kubernetes.timeout``, counted over the whole call (connecting, the status line, the headers and the body), not
per socket read: before, a scale-in decision on a trickled node list of four nodes had no answer after 20 s and
would have held its pool for about 20 minutes. The real kubernetes client against the fake API server."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from autoscaler.app import create_app
from autoscaler.cluster.kube import KubeCluster
from autoscaler.cluster.nodes import ClusterError
from autoscaler.config import KubernetesConfig
from tests.support.fakes.httpbase import Reply, Request
from tests.support.fakes.kube import FakeKube
from tests.support import FakeClock, am_alert, am_payload, answered_within, config, post

POOL = {"pool": "gpu"}
NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
TIMEOUT = 2.0
BOUND = f"kubernetes.timeout {TIMEOUT:g}s; the old code read the trickle to its end, minutes later"


class TricklingKube(FakeKube):
    """The node list (or, with ``what="pods"``, the pod list) answered a byte every 0.5 s: a stuck API server or
    proxy that still sends; ``head`` trickles the status line and headers too."""

    what = "nodes"
    head = False

    def handle(self, request: Request) -> Reply:
        reply = super().handle(request)
        if request.method == "GET" and request.path == f"/api/v1/{self.what}":
            reply.trickle, reply.trickle_head = 0.5, self.head
        return reply


def _kube(what: str = "nodes", head: bool = False) -> TricklingKube:
    fake = TricklingKube()
    fake.what, fake.head = what, head
    for day, name in enumerate(NAMES, start=1):
        fake.add_node(name, POOL, created=f"2026-11-0{day}T00:00:00Z")
    return fake


@pytest.mark.parametrize("what, head", [("nodes", False), ("nodes", True), ("pods", False)],
                         ids=["node-list-body", "node-list-status-line", "pod-list-body"])
def test_a_trickled_list_fails_the_pool_read_within_the_timeout(what: str, head: bool) -> None:
    with _kube(what, head) as kube:
        c = KubeCluster(KubernetesConfig(host=kube.url, token=kube.token, timeout=TIMEOUT))
        took, got = answered_within(20, BOUND, lambda: c.read_pool("gpu", POOL))
        assert isinstance(got, ClusterError), got
        assert f"no answer within kubernetes.timeout {TIMEOUT:g}s" in str(got), got
        assert took < 2 * TIMEOUT, took
        stop = time.monotonic() + 2  # the connection is dropped, not left reading: the server sees the hang-up
        while not kube.hung_up and time.monotonic() < stop:
            time.sleep(0.05)
        assert kube.hung_up, "the client still held the trickled connection"


def test_a_call_after_a_trickled_one_is_answered() -> None:
    """The cut connection is not handed to the next call; the next call has its own deadline."""
    with _kube() as kube:
        c = KubeCluster(KubernetesConfig(host=kube.url, token=kube.token, timeout=TIMEOUT))
        assert isinstance(answered_within(20, BOUND, lambda: c.read_pool("gpu", POOL))[1], ClusterError)
        kube.what = "nothing trickled"
        assert [v.name for v in c.read_pool("gpu", POOL).nodes] == NAMES


def test_the_scale_in_decision_on_a_trickled_node_list_records_a_failure(tmp_path: Path) -> None:
    pool = {"name": "gpu", "provider": "simulated", "min": 0, "max": 6, "node_selector": "pool=gpu",
            "simulated": {"nodes": NAMES}, "scale_in": {"victims": "idle", "step": 2}}
    with _kube() as kube:
        cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool],
                     kubernetes={"host": kube.url, "token": kube.token, "timeout": TIMEOUT})
        client = create_app(cfg, clock=FakeClock(), startup_check=False).test_client()
        took, resp = answered_within(20, BOUND, lambda: post(client, "/webhook/alertmanager",
                                              am_payload(am_alert("GPUUtilizationLow", fingerprint="d"))))
        assert resp.status_code == 503, resp.get_data(as_text=True)  # failed: the sender retries
        d = resp.get_json()["decisions"][0]
        assert (d["outcome"], d["from"], d["to"]) == ("failed", 4, 4), d
        assert f"no answer within kubernetes.timeout {TIMEOUT:g}s" in d["reason"], d["reason"]
        assert took < 2 * TIMEOUT, took
        assert not any(v["spec"].get("unschedulable") for v in kube.nodes.values())  # nothing cordoned
