"""CONTRACT "Node-aware scale-in: which nodes go", through the app: a `simulated` pool (which removes nodes by name)
over the real kubernetes client against the fake API server; alerts with a custom `routing.node_label` (the
dcgm-exporter's `Hostname`)."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from tests.support.fakes.kube import FakeKube
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, post

LABELS = {"pool": "gpu"}
NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]  # oldest first


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        for day, name in enumerate(NAMES, start=1):
            fake.add_node(name, LABELS, created=f"2026-11-0{day}T00:00:00Z")
        fake.add_pod("train-7", "gpu-b", gpus=8)
        yield fake


def app(tmp_path: Any, kube: FakeKube, **scale_in: Any) -> FlaskClient:
    pool = {"name": "gpu", "provider": "simulated", "min": 0, "max": 6, "node_selector": "pool=gpu",
            "simulated": {"nodes": NAMES}, "scale_in": scale_in}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], routing={"node_label": "Hostname"},
                 kubernetes={"host": kube.url, "token": kube.token})
    return create_app(cfg, clock=FakeClock(), startup_check=False).test_client()


def scale_in(client: FlaskClient, fingerprint: str = "fp1", **labels: str) -> dict[str, Any]:
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow", fingerprint=fingerprint,
                                                                      **labels)))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def event(client: FlaskClient, event_id: int) -> dict[str, Any]:
    found = [e for e in client.get("/api/v1/events", headers=AUTH).get_json()["events"] if e["id"] == event_id]
    return found[0]


def test_idle_is_the_default_and_the_alerts_node_goes_first(tmp_path: Any, kube: FakeKube) -> None:
    client = app(tmp_path, kube, step=2)
    d = scale_in(client, Hostname="gpu-a")
    assert (d["outcome"], d["from"], d["to"]) == ("scaled", 4, 2)
    details = event(client, d["event_id"])["details"]
    assert details["nodes"] == ["gpu-a", "gpu-d"]  # the named one, then the newest idle one
    assert kube.nodes["gpu-a"]["spec"]["unschedulable"] is True  # cordoned before the removal


def test_alerted_takes_only_named_nodes_at_most_the_step(tmp_path: Any, kube: FakeKube) -> None:
    client = app(tmp_path, kube, victims="alerted", step=1)
    resp = post(client, "/webhook/alertmanager", am_payload(
        am_alert("GPUUtilizationLow", fingerprint="fp1", Hostname="gpu-c"),
        am_alert("GPUUtilizationLow", fingerprint="fp2", Hostname="gpu-a")))
    (d,) = resp.get_json()["decisions"]  # one pool and action: one decision
    assert (d["outcome"], d["from"], d["to"]) == ("scaled", 4, 3)
    assert event(client, d["event_id"])["details"]["nodes"] in (["gpu-c"], ["gpu-a"])
    assert "unschedulable" not in kube.nodes["gpu-d"]["spec"]  # the newest, unnamed, stays


def test_busy_named_node_is_skipped_in_use_with_the_reason(tmp_path: Any, kube: FakeKube) -> None:
    client = app(tmp_path, kube, victims="alerted")
    d = scale_in(client, Hostname="gpu-b")
    assert (d["outcome"], d["from"], d["to"]) == ("skipped_in_use", 4, 4)
    assert "gpu-b: runs GPU pod ml/train-7" in d["reason"]
    kept = event(client, d["event_id"])["details"]["kept"]
    assert kept[0]["node"] == "gpu-b" and kept[0]["reason"].startswith("runs GPU pod ml/train-7")


def test_manual_named_removal_and_a_busy_one_needs_force(tmp_path: Any, kube: FakeKube) -> None:
    client = app(tmp_path, kube)
    busy = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpu-b"]}).get_json()
    assert busy["outcome"] == "skipped_in_use" and "gpu-b: runs GPU pod ml/train-7" in busy["reason"]
    idle = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpu-c"]}).get_json()
    assert (idle["outcome"], idle["from"], idle["to"]) == ("scaled", 4, 3)
    assert event(client, idle["event_id"])["details"]["nodes"] == ["gpu-c"]
    assert client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["current"] == 3
