"""Node-aware scale-in through the app: the real kubernetes client against the fake API server, the real webhook
provider (which removes named nodes) against a receiver, the real store; a hand-moved clock."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import Outcome
from autoscaler.cluster.nodes import CORDON_ANNOTATION, cordon_mark
from autoscaler.nodes.scale_in import Removal
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, post

LABELS = {"agentpool": "gpunp"}
NOW = 1_800_000_000.0


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        # oldest .. newest
        fake.add_node("gpunp-0", LABELS, created="2026-11-01T00:00:00Z")
        fake.add_node("gpunp-1", LABELS, created="2026-11-02T00:00:00Z")
        fake.add_node("gpunp-2", LABELS, created="2026-11-03T00:00:00Z")
        fake.add_node("other-0", {"agentpool": "cpu"}, created="2026-11-04T00:00:00Z")
        fake.add_pod("train-7", "gpunp-2", gpus=8)  # the newest node is busy
        fake.add_pod("web", "gpunp-1", gpus=0)  # CPU-only work does not keep a node
        yield fake


class Stack:
    def __init__(self, client: FlaskClient, clock: FakeClock, sleeps: list[float]) -> None:
        self.client, self.clock, self.sleeps = client, clock, sleeps


def pool_cfg(url: str, count: int = 3, **scale_in: Any) -> dict[str, Any]:
    return {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": url, "initial_count": count}, "scale_in": scale_in}


def make(tmp_path: Any, kube: FakeKube, url: str, count: int = 3, **scale_in: Any) -> Stack:
    clock = FakeClock(NOW)
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool_cfg(url, count, **scale_in)],
                 kubernetes={"host": kube.url, "token": kube.token})
    app = create_app(cfg, clock=clock, startup_check=False)
    return Stack(app.test_client(), clock, clock.sleeps)


def scale_in_alert(client: FlaskClient, fingerprint: str = "fp1", status: int = 200, **labels: str) -> dict[str, Any]:
    """The alert's one decision; the answer's status is ``status`` (503: a failure the sender should retry)."""
    alert = am_alert("GPUUtilizationLow", fingerprint=fingerprint, **labels)
    resp = post(client, "/webhook/alertmanager", am_payload(alert))
    assert resp.status_code == status, resp.get_data(as_text=True)
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def last_event(client: FlaskClient) -> dict[str, Any]:
    resp = client.get("/api/v1/events?limit=1", headers=AUTH)
    return resp.get_json()["events"][0]  # type: ignore[no-any-return]


def test_idle_newest_node_goes_busy_one_kept(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    kube.calls.clear()
    d = scale_in_alert(s.client)
    assert d["outcome"] == "scaled" and (d["from"], d["to"]) == (3, 2)
    assert [r.body["nodes"] for r in receiver.received] == [["gpunp-1"]]
    ev = last_event(s.client)
    assert ev["details"]["nodes"] == ["gpunp-1"]
    assert ev["details"]["kept"] == [{"node": "gpunp-2", "reason": "runs GPU pod ml/train-7 (nvidia.com/gpu 8)"}]
    assert "kept gpunp-2: runs GPU pod ml/train-7" in ev["reason"]
    node = kube.nodes["gpunp-1"]
    assert node["spec"]["unschedulable"] is True  # stays cordoned while the cloud removes it
    assert node["metadata"]["annotations"][CORDON_ANNOTATION].endswith("/removing@2027-01-15T08:00:00Z")
    # one node list, one pod list for the pool, cordon, re-read (node + pods), the "removing" mark
    assert kube.calls == {"LIST nodes": 1, "LIST pods": 2, "PATCH nodes": 2, "GET nodes": 1}


def test_alert_named_node_goes_first(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    d = scale_in_alert(s.client, node="gpunp-0")
    assert d["outcome"] == "scaled"
    assert receiver.received[0].body["nodes"] == ["gpunp-0"]


def test_alerted_mode_busy_named_node_is_kept(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url, victims="alerted")
    d = scale_in_alert(s.client, node="gpunp-2")
    assert d["outcome"] == "skipped_in_use" and (d["from"], d["to"]) == (3, 3)
    assert "gpunp-2: runs GPU pod ml/train-7 (nvidia.com/gpu 8)" in d["reason"]
    assert receiver.received == []


def test_all_busy_is_skipped_in_use_and_nothing_cordoned(tmp_path: Any, kube: FakeKube,
                                                        receiver: WebhookReceiver) -> None:
    kube.add_pod("train-8", "gpunp-0", gpus=4, resource="nvidia.com/mig-3g.40gb")
    kube.add_pod("db", "gpunp-1", annotations={"karpenter.sh/do-not-disrupt": "true"})
    s = make(tmp_path, kube, receiver.url)
    d = scale_in_alert(s.client)
    assert d["outcome"] == "skipped_in_use"
    assert "gpunp-2: runs GPU pod ml/train-7" in d["reason"] and "gpunp-0: runs GPU pod ml/train-8" in d["reason"]
    assert "gpunp-1: runs pod ml/db annotated karpenter.sh/do-not-disrupt=true" in d["reason"]
    assert all("unschedulable" not in n["spec"] for n in kube.nodes.values())
    assert kube.calls["PATCH nodes"] == 0 and receiver.received == []
    # no cooldown started: a later alert may act once the node is free
    del kube.pods[("ml", "train-8")]
    assert scale_in_alert(s.client, fingerprint="fp2")["outcome"] == "scaled"


def test_pod_landing_while_cordoning_keeps_the_node(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.on_cordon = lambda name: kube.add_pod("late", name, gpus=1) if name == "gpunp-1" else None
    s = make(tmp_path, kube, receiver.url, step=2)
    d = scale_in_alert(s.client)
    assert d["outcome"] == "scaled" and (d["from"], d["to"]) == (3, 2)
    assert receiver.received[0].body["nodes"] == ["gpunp-0"]
    assert "unschedulable" not in kube.nodes["gpunp-1"]["spec"]
    assert CORDON_ANNOTATION not in kube.nodes["gpunp-1"]["metadata"]["annotations"]
    kept = last_event(s.client)["details"]["kept"]
    assert {"node": "gpunp-1", "reason": "runs GPU pod ml/late (nvidia.com/gpu 1)"} in kept


def test_cloud_refusal_uncordons(tmp_path: Any, kube: FakeKube) -> None:
    with FakeKube() as closed:  # a port nobody listens on once stopped
        dead = closed.url
    s = make(tmp_path, kube, dead)
    d = scale_in_alert(s.client, status=503)
    assert d["outcome"] == "failed"
    assert all("unschedulable" not in n["spec"] for n in kube.nodes.values())
    assert last_event(s.client)["details"]["nodes"] == ["gpunp-1"]


def test_sweep_uncordons_what_a_dead_decision_left(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.nodes["gpunp-0"]["spec"]["unschedulable"] = True
    kube.nodes["gpunp-0"]["metadata"]["annotations"][CORDON_ANNOTATION] = cordon_mark("host:1:dead", NOW - 200)
    kube.nodes["gpunp-1"]["spec"]["unschedulable"] = True  # an operator's cordon: not ours to lift
    s = make(tmp_path, kube, receiver.url)
    kube.calls.clear()
    resp = post(s.client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh")))  # a scale-out
    assert resp.get_json()["decisions"][0]["outcome"] == "scaled"
    assert "unschedulable" not in kube.nodes["gpunp-0"]["spec"]
    assert kube.nodes["gpunp-1"]["spec"]["unschedulable"] is True
    assert kube.calls == {"LIST nodes": 1, "PATCH nodes": 1}  # the sweep reads nodes only


def test_removing_mark_is_left_to_the_cloud(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.nodes["gpunp-0"]["spec"]["unschedulable"] = True
    kube.nodes["gpunp-0"]["metadata"]["annotations"][CORDON_ANNOTATION] = cordon_mark("h:1:c/removing", NOW - 200)
    s = make(tmp_path, kube, receiver.url)
    post(s.client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh")))
    assert kube.nodes["gpunp-0"]["spec"]["unschedulable"] is True


def manual(s: Stack, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    resp = post(s.client, "/api/v1/pools/gpu/scale", body)
    return resp.status_code, resp.get_json()


def test_manual_named_busy_node_needs_force(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    code, d = manual(s, {"action": "scale_in", "nodes": ["gpunp-2"]})
    assert code == 200 and d["outcome"] == "skipped_in_use"
    assert 'runs GPU pod ml/train-7 (nvidia.com/gpu 8) (add "force": true' in d["reason"]
    assert receiver.received == []


def test_manual_named_idle_nodes(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    code, d = manual(s, {"action": "scale_in", "nodes": ["gpunp-0", "nope"]})
    assert code == 200 and d["outcome"] == "scaled" and d["to"] == 2
    assert receiver.received[0].body["nodes"] == ["gpunp-0"]
    kept = last_event(s.client)["details"]["kept"]
    assert kept == [{"node": "nope", "reason": "not a node of pool gpu (selector agentpool=gpunp)"}]


def test_forced_removal_retries_pdb_then_removes(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.pdb[("ml", "train-7")] = 3  # the budget frees up after three refusals
    s = make(tmp_path, kube, receiver.url)
    code, d = manual(s, {"action": "scale_in", "nodes": ["gpunp-2"], "force": True})
    assert code == 200 and d["outcome"] == "scaled", d
    assert ("ml", "train-7") not in kube.pods  # evicted, through the Eviction API
    assert kube.calls["CREATE eviction"] == 4 and s.sleeps == [5.0, 5.0, 5.0]
    assert receiver.received[0].body["nodes"] == ["gpunp-2"]
    assert not any(m == "DELETE" for m, _ in kube.log)  # never deletes a pod


def test_forced_removal_gives_up_after_drain_timeout(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.pdb[("ml", "train-7")] = 10**6
    s = make(tmp_path, kube, receiver.url, drain_timeout="30s")
    code, d = manual(s, {"action": "scale_in", "nodes": ["gpunp-2"], "force": True})
    assert code == 200 and d["outcome"] == "failed"
    assert "gave up after drain_timeout 30s: GPU pod ml/train-7 blocks the drain" in d["reason"]
    assert "disruption budget" in d["reason"]
    assert "unschedulable" not in kube.nodes["gpunp-2"]["spec"] and receiver.received == []
    assert ("ml", "train-7") in kube.pods and sum(s.sleeps) >= 30


def test_nodes_need_scale_in_and_a_cluster(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    code, d = manual(s, {"action": "scale_out", "nodes": ["gpunp-0"]})
    assert code == 422 and "nodes" in d["error"]
    code, d = manual(s, {"action": "scale_in", "nodes": ["bad name!"]})
    assert code == 422


def settings_problems(pool: dict[str, Any], kubernetes: bool = True) -> list[str]:
    raw = config("sqlite://", pools=[pool])
    if kubernetes:
        raw["kubernetes"] = {"host": "http://127.0.0.1:1", "token": "t"}
    try:
        build_settings(raw)
    except ConfigError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize("pool, kubernetes, expected", [
    pytest.param({"name": "gpu", "provider": "ack_hook", "min": 0, "max": 3, "scale_in": {"victims": "idle"},
                  "ack_hook": {"scale_out_url": "https://cs.example.com/x?token=a",
                               "scale_in_url": "https://cs.example.com/y?token=b"}}, True,
                 "pools[0].scale_in.victims: idle needs a provider that removes named nodes; "
                 "ack_hook can't name a node",
                 id="ack-hook-cannot-name-a-node"),
    pytest.param(pool_cfg("http://127.0.0.1:9/hook", victims="alerted"), False,
                 "pools[0].scale_in.victims: alerted needs the top-level `kubernetes:` section", id="needs-kubernetes"),
    pytest.param({**pool_cfg("http://127.0.0.1:9/hook", victims="idle"), "node_selector": None}, True,
                 "pools[0].node_selector: required with victims: idle", id="needs-a-selector"),
    pytest.param({**pool_cfg("http://127.0.0.1:9/hook"), "node_selector": "a b"}, True,
                 "pools[0].node_selector: 'a b' is not label=value", id="bad-selector"),
])
def test_check_config(pool: dict[str, Any], kubernetes: bool, expected: str) -> None:
    assert any(p.startswith(expected) for p in settings_problems(pool, kubernetes)), settings_problems(pool, kubernetes)


@pytest.mark.parametrize("kubernetes, victims", [pytest.param(True, "idle", id="kubernetes-and-named-removal"),
                                                 pytest.param(False, "cloud", id="no-kubernetes")])
def test_default_victims(kubernetes: bool, victims: str) -> None:
    raw = config("sqlite://", pools=[pool_cfg("http://127.0.0.1:9/hook")])
    if kubernetes:
        raw["kubernetes"] = {"host": "http://127.0.0.1:1", "token": "t"}
    spec = build_settings(raw).pools["gpu"]
    assert spec.victims == victims and spec.node_selector == (("agentpool", "gpunp"),) and spec.drain_timeout == 600


def test_pool_shows_its_nodes(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    kube.add_pod("db", "gpunp-0", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    kube.nodes["gpunp-1"]["spec"]["unschedulable"] = True
    s = make(tmp_path, kube, receiver.url)
    before = s.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert "nodes" not in before and "not listed yet" in before["nodes_error"]
    s.client.application.extensions["autoscaler_reconciler"].tick(s.clock())  # the reconciler lists the nodes
    kube.calls.clear()
    body = s.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert body["nodes_read_at"] == s.clock() and body["nodes_age_s"] == 0 and "nodes_error" not in body
    assert [n["name"] for n in body["nodes"]] == ["gpunp-2", "gpunp-1", "gpunp-0"]  # newest first
    busy, cordoned, protected = body["nodes"]
    assert busy["gpu_pods"] == [{"namespace": "ml", "name": "train-7", "resource": "nvidia.com/gpu", "count": 8}]
    assert busy["removable"] is False and busy["protected"] is None and busy["ready"] is True
    assert cordoned["cordoned"] is True and cordoned["cordoned_by_us"] is False and cordoned["removable"] is True
    assert protected["protected"] == "runs pod ml/db annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false"
    listed = s.client.get("/api/v1/pools", headers=AUTH).get_json()["pools"][0]
    assert "nodes" not in listed  # the list (and /metrics) never reads the cluster
    page = s.client.get("/", headers=AUTH).get_data(as_text=True)
    assert 'data-node="gpunp-2"' in page and "ml/train-7" in page and "safe-to-evict=false" in page
    assert not kube.calls  # pages and the API read the stored view: no request lists the cluster (issue 24)


def test_pool_nodes_error_is_said(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    kube.token = "rotated"
    s.client.application.extensions["autoscaler_reconciler"].tick(s.clock())
    body = s.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert "nodes" not in body and body["nodes_error"].startswith("listing nodes agentpool=gpunp: 401")
    kube.token = FakeKube.token  # back: the next listing stores the nodes; then a failed one keeps them, said
    s.client.application.extensions["autoscaler_reconciler"].tick(s.clock())
    s.clock.advance(30)
    kube.token = "rotated"
    s.client.application.extensions["autoscaler_reconciler"].tick(s.clock())
    body = s.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert len(body["nodes"]) == 3 and body["nodes_age_s"] == 30 and "401" in body["nodes_error"]


def test_a_node_already_being_removed_is_not_picked_again(tmp_path: Any, kube: FakeKube,
                                                          receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    assert scale_in_alert(s.client)["outcome"] == "scaled"  # gpunp-1 goes; the cloud is slow to delete it
    s.clock.advance(1000)  # past the 15 min cooldown, within the 30 min the cloud has to remove it
    assert scale_in_alert(s.client, fingerprint="fp2")["outcome"] == "scaled"
    assert [r.body["nodes"] for r in receiver.received] == [["gpunp-1"], ["gpunp-0"]]


def test_unreadable_cluster_fails_the_scale_in_and_never_lets_the_cloud_pick(tmp_path: Any, kube: FakeKube,
                                                                              receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url)
    kube.token = "rotated"
    resp = post(s.client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow")))
    assert resp.status_code == 503  # the sender retries
    d = resp.get_json()["decisions"][0]
    assert d["outcome"] == "failed" and "kubernetes: listing nodes agentpool=gpunp: 401" in d["reason"]
    assert receiver.received == []
    assert last_event(s.client)["details"]["code"] == "KubernetesApi"


def test_alerted_mode_without_a_node_label_removes_nothing(tmp_path: Any, kube: FakeKube,
                                                           receiver: WebhookReceiver) -> None:
    s = make(tmp_path, kube, receiver.url, victims="alerted")
    d = scale_in_alert(s.client)
    assert d["outcome"] == "skipped_in_use" and "the alerts name no node (label routing.node_label)" in d["reason"]
    assert receiver.received == [] and kube.calls["PATCH nodes"] == 0


def test_named_nodes_need_a_pool_that_can_name_them(tmp_path: Any) -> None:
    app = create_app(config(f"sqlite:///{tmp_path}/s.db"), startup_check=False)  # simulated pools, no kubernetes
    resp = post(app.test_client(), "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpu-0"]})
    assert resp.status_code == 422 and "cannot remove named nodes" in resp.get_json()["error"]


def test_dry_run_names_the_nodes_it_would_remove(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    clock = FakeClock(NOW)
    pool = {**pool_cfg(receiver.url), "dry_run": True}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
    client = create_app(cfg, clock=clock, startup_check=False).test_client()
    d = scale_in_alert(client)
    assert d["outcome"] == "dry_run" and "would remove gpunp-1" in d["reason"]
    ev = last_event(client)
    assert ev["details"]["nodes"] == ["gpunp-1"] and ev["details"]["kept"][0]["node"] == "gpunp-2"
    assert kube.calls["PATCH nodes"] == 0 and receiver.received == []


def test_details_list_at_most_a_hundred_kept_nodes() -> None:
    kept = tuple((f"n{i}", "runs GPU pod ml/x (nvidia.com/gpu 8)") for i in range(130))
    details = Removal(Outcome.SCALED, 5, "removed a", ("a",), kept).details()
    assert len(details["kept"]) == 100 and details["kept_total"] == 130 and details["nodes"] == ["a"]
    assert "kept_total" not in Removal(Outcome.SCALED, 5, "removed a", ("a",), kept[:3]).details()


def test_node_gone_between_pick_and_cordon_is_kept_not_failed(tmp_path: Any, kube: FakeKube,
                                                              receiver: WebhookReceiver) -> None:
    """Two idle nodes picked; one is deleted (by someone else) before it is cordoned: the other goes, the gone one
    is kept with "gone" as its reason, as the re-read already treats a node that vanished."""
    def delete_the_other(name: str) -> None:
        if name == "gpunp-1":
            del kube.nodes["gpunp-0"]

    kube.on_cordon = delete_the_other
    s = make(tmp_path, kube, receiver.url, step=2)
    d = scale_in_alert(s.client)
    assert d["outcome"] == "scaled" and (d["from"], d["to"]) == (3, 2), d
    assert [r.body["nodes"] for r in receiver.received] == [["gpunp-1"]]
    kept = last_event(s.client)["details"]["kept"]
    assert {"node": "gpunp-0", "reason": "gone before its removal was asked"} in kept
