"""Drill: the Kubernetes API refuses or is gone in the middle of a node-aware scale-in. Every node cordoned is
uncordoned, and the decision's reason says what to do: a 403 names the RBAC the service account lacks, a 401 the
token, an unreachable server its address and what went wrong (not a bare urllib3 class name)."""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from tests.support.fakes.httpbase import Reply, Request
from tests.support.fakes.kube import FakeKube, status
from tests.support import FakeClock, am_alert, am_payload, config, post

NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


class RefusingKube(FakeKube):
    """Answers ``refuse`` (status, reason, message) to PATCHes of nodes after the first ``allowed`` ones."""

    refuse: tuple[int, str, str] = (403, "Forbidden", "")
    allowed = 0

    def handle(self, request: Request) -> Reply:
        if request.method == "PATCH" and request.path.startswith("/api/v1/nodes/"):
            if self.allowed <= 0:
                self.log.append((request.method, request.path))
                return status(*self.refuse)
            self.allowed -= 1
        return super().handle(request)


def _client(tmp_path: Path, host: str, token: str, clock: FakeClock | None = None) -> FlaskClient:
    pool = {"name": "gpu", "provider": "simulated", "min": 0, "max": 6, "node_selector": "pool=gpu",
            "simulated": {"nodes": NAMES}, "scale_in": {"victims": "idle", "step": 2}}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": host, "token": token})
    return create_app(cfg, clock=clock or FakeClock(), startup_check=False).test_client()


def _scale_in(client: FlaskClient) -> dict[str, Any]:
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow", fingerprint="d")))
    assert resp.status_code == 503, resp.get_data(as_text=True)  # a failed decision: Alertmanager retries
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("allowed, refuse, hint", [
    pytest.param(0, (403, "Forbidden", 'nodes "gpu-d" is forbidden: User "system:serviceaccount:ops:autoscaler" '
                 'cannot patch resource "nodes"'), "deploy/kubernetes/rbac.yaml", id="rbac-missing-first-cordon"),
    pytest.param(1, (403, "Forbidden", "cannot patch resource nodes"), "deploy/kubernetes/rbac.yaml",
                 id="rbac-revoked-mid-scale-in"),
    pytest.param(1, (401, "Unauthorized", "Unauthorized"), "kubernetes.token", id="token-expired-mid-scale-in"),
])
def test_refused_cordon_says_what_to_fix_and_what_stays_cordoned(
        tmp_path: Path, allowed: int, refuse: tuple[int, str, str], hint: str) -> None:
    with RefusingKube() as kube:
        for day, name in enumerate(NAMES, start=1):
            kube.add_node(name, {"pool": "gpu"}, created=f"2026-11-0{day}T00:00:00Z")
        kube.refuse, kube.allowed = refuse, allowed
        clock = FakeClock()
        client = _client(tmp_path, kube.url, kube.token, clock)
        d = _scale_in(client)
        assert (d["outcome"], d["from"], d["to"]) == ("failed", 4, 4)
        assert f"{refuse[0]} " in d["reason"] and hint in d["reason"], d["reason"]
        cordoned = [n for n, v in kube.nodes.items() if v["spec"].get("unschedulable")]
        if allowed:  # gpu-d was cordoned, then the API refused its uncordon too: the reason says so and what to do
            assert cordoned == ["gpu-d"]
            assert "left cordoned (the uncordon failed too): gpu-d" in d["reason"], d["reason"]
            assert "kubectl uncordon gpu-d" in d["reason"]
            kube.allowed = 99  # the operator fixed the RBAC / token: the next decision's sweep lifts the cordon
            clock.advance(61)  # after the failure's backoff
            resp = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh", fingerprint="e")))
            assert resp.status_code == 200, resp.get_data(as_text=True)
            cordoned = [n for n, v in kube.nodes.items() if v["spec"].get("unschedulable")]
        assert cordoned == []


def test_unreachable_api_server_is_named_with_its_cause(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{s.getsockname()[1]}"
    d = _scale_in(_client(tmp_path, host, "t"))
    assert d["outcome"] == "failed"
    assert f"API server {host} unreachable" in d["reason"] and "Connection refused" in d["reason"], d["reason"]
    assert "MaxRetryError" not in d["reason"]


def test_a_kubernetes_failure_does_not_back_the_pool_off(tmp_path: Path) -> None:
    """The API server refused the cordon: the cloud was never asked, so a scale-out right after still acts (it
    would otherwise wait out a backoff meant for a failing cloud, while the cluster is the one to fix)."""
    with RefusingKube() as kube:
        for day, name in enumerate(NAMES, start=1):
            kube.add_node(name, {"pool": "gpu"}, created=f"2026-11-0{day}T00:00:00Z")
        client = _client(tmp_path, kube.url, kube.token)
        d = _scale_in(client)
        assert d["outcome"] == "failed" and "no backoff" in d["reason"], d["reason"]
        resp = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh", fingerprint="e")))
        assert resp.status_code == 200, resp.get_data(as_text=True)
        assert [x["outcome"] for x in resp.get_json()["decisions"]] == ["scaled"]
