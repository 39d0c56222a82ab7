"""Node repair through the app, on a hand-moved clock: the real kubernetes client against the fake API server, the
webhook provider (it removes named nodes) against a receiver, the real store. Starting (budget, duplicate, pause,
dry run), each reconciler step (a Job's pod within grace and after, a Job that ends, a node gone by itself, a
failed removal kept for the next tick), cancel, and the guards of the API and check-config."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support.repair_rig import GRACE, NOW, Rig, cordoned, rig, scale_calls, seeded_kube
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, post


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with seeded_kube() as fake:
        yield fake


def repair(client: FlaskClient, *nodes: str, fingerprint: str = "fp1") -> dict[str, Any]:
    alerts = [am_alert("GPUNodeUnhealthy", fingerprint=f"{fingerprint}-{n}", autoscaler_pool="gpu",
                       autoscaler_action="repair", node=n) for n in nodes]
    resp = post(client, "/webhook/alertmanager", am_payload(*alerts))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def test_a_jobs_node_waits_within_grace_and_goes_when_the_job_ends(tmp_path: Any, kube: FakeKube,
                                                                    receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    d = repair(r.client, "gpunp-0")
    assert d["outcome"] == "repair_started" and (d["from"], d["to"]) == (4, 5), d
    assert cordoned(kube, "gpunp-0")
    assert [b["to"] for b in scale_calls(receiver)] == [5]  # the replacement, at once
    assert r.tick() == [] and r.repairs()[0]["state"] == "waiting"
    assert ("ml", "train-7") in kube.pods and kube.calls["CREATE eviction"] == 0  # a Job's pod is never evicted
    assert r.tick(GRACE / 2) == [] and cordoned(kube, "gpunp-0")
    kube.pods[("ml", "train-7")]["status"]["phase"] = "Succeeded"  # the training run ends by itself
    done = r.tick()
    assert [e["outcome"] for e in done] == ["repaired"], done
    assert scale_calls(receiver)[-1]["nodes"] == ["gpunp-0"]  # exactly that node, by name
    assert done[0]["details"]["node"] == "gpunp-0" and done[0]["details"]["replacement"] == 5
    assert r.repairs() == [] and r.last_event()["source"] == "reconcile"
    assert ("gpu-operator", "dcgm-0") in kube.pods  # DaemonSet pods are left to the node's end


def test_past_grace_the_jobs_pod_is_evicted_then_the_node_removed(tmp_path: Any, kube: FakeKube,
                                                                  receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-0")
    assert r.tick() == []
    assert r.tick(GRACE) == [] and ("ml", "train-7") not in kube.pods  # evicted once grace has passed
    assert r.repairs()[0]["state"] == "draining"
    done = r.tick()
    assert [e["outcome"] for e in done] == ["repaired"] and "after repair.grace" in done[0]["reason"]


def test_movable_work_is_evicted_at_once_and_a_budget_refusal_is_asked_again(tmp_path: Any, kube: FakeKube,
                                                                             receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    kube.pdb[("ml", "infer-a")] = 1  # the budget refuses the first eviction
    repair(r.client, "gpunp-1")
    assert r.tick() == [] and ("ml", "infer-a") in kube.pods
    assert "disruption budget" in r.repairs()[0]["error"]
    assert r.tick() == [] and ("ml", "infer-a") not in kube.pods
    assert [e["outcome"] for e in r.tick()] == ["repaired"]
    assert kube.calls["CREATE eviction"] == 2


def test_the_budget_holds_a_second_node_and_touches_nothing(tmp_path: Any, kube: FakeKube,
                                                           receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    assert repair(r.client, "gpunp-2")["outcome"] == "repair_started"
    patches = kube.calls["PATCH nodes"]
    d = repair(r.client, "gpunp-3", fingerprint="fp2")
    assert d["outcome"] == "skipped_repair_budget", d
    assert "1 of at most 1 node(s) already in repair" in d["reason"]
    assert not cordoned(kube, "gpunp-3") and kube.calls["PATCH nodes"] == patches
    assert len(receiver.received) == 1 and [x["node"] for x in r.repairs()] == ["gpunp-2"]
    assert repair(r.client, "gpunp-2", fingerprint="fp3")["outcome"] == "skipped_duplicate"
    assert len(receiver.received) == 1


def test_a_percentage_budget_starts_what_fits_in_one_decision(tmp_path: Any, kube: FakeKube,
                                                             receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url, max_unhealthy="50%")  # 4 nodes: 2 at once
    d = repair(r.client, "gpunp-1", "gpunp-2", "gpunp-3")
    assert d["outcome"] == "repair_started" and (d["from"], d["to"]) == (4, 6), d
    assert sorted(d_["node"] for d_ in r.repairs()) == ["gpunp-1", "gpunp-2"]
    assert not cordoned(kube, "gpunp-3")
    assert r.last_event()["details"]["kept"][0]["node"] == "gpunp-3"


def test_paused_pool_starts_nothing_and_holds_a_repair(tmp_path: Any, kube: FakeKube,
                                                       receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-2")
    assert post(r.client, "/api/v1/pools/gpu/pause", {"reason": "maintenance"}).status_code == 200
    assert repair(r.client, "gpunp-3", fingerprint="fp2")["outcome"] == "skipped_paused"
    assert r.tick() == [] and r.repairs()[0]["state"] == "cordoned" and "gpunp-2" in kube.nodes
    assert post(r.client, "/api/v1/pools/gpu/resume", {}).status_code == 200
    assert [e["outcome"] for e in r.tick()] == ["repaired"]


def test_dry_run_says_what_it_would_do_and_touches_nothing(tmp_path: Any, kube: FakeKube,
                                                          receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url, dry_run=True)
    d = repair(r.client, "gpunp-1")
    assert d["outcome"] == "dry_run", d
    assert "would cordon gpunp-1, ask for a replacement (4 -> 5)" in d["reason"]
    assert not cordoned(kube, "gpunp-1") and receiver.received == [] and r.repairs() == []
    assert kube.calls["PATCH nodes"] == 0 and r.tick() == []


def test_cancel_uncordons_and_keeps_the_replacement(tmp_path: Any, kube: FakeKube,
                                                    receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-0")
    resp = post(r.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-0"], "cancel": True, "reason": "false alarm"})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["repairs"] == [] and not cordoned(kube, "gpunp-0")
    event = r.last_event()
    assert (event["outcome"], event["source"], event["details"]["node"]) == ("repair_cancelled", "operator", "gpunp-0")
    assert [b["to"] for b in scale_calls(receiver)] == [5]  # the replacement stays; nothing more asked
    assert r.tick() == [] and not cordoned(kube, "gpunp-0")
    again = post(r.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-0"], "cancel": True})
    assert again.status_code == 409 and "not in repair" in again.get_json()["error"]


def test_a_node_that_leaves_by_itself_ends_its_repair(tmp_path: Any, kube: FakeKube,
                                                      receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-0")
    del kube.nodes["gpunp-0"]  # the cloud's own auto-repair replaced it
    done = r.tick()
    assert [e["outcome"] for e in done] == ["repaired"] and done[0]["details"]["removed_by"] == "gone"
    assert "left the cluster by itself" in done[0]["reason"]
    assert len(receiver.received) == 1 and r.repairs() == []
    again = repair(r.client, "gpunp-0", fingerprint="fp-repeat")  # Alertmanager repeats the alert a while longer
    assert again["outcome"] == "skipped_duplicate" and "no longer in the cluster" in again["reason"], again
    assert len(receiver.received) == 1


def test_manual_api_starts_a_repair_and_refuses_what_means_nothing(tmp_path: Any, kube: FakeKube,
                                                                   receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    d = post(r.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-2"], "reason": "XID 79"}).get_json()
    assert d["outcome"] == "repair_started" and "XID 79" in d["reason"], d
    assert r.repairs()[0]["reason"].endswith("XID 79")
    stranger = post(r.client, "/api/v1/pools/gpu/repair", {"nodes": ["cpu-0"]}).get_json()
    assert stranger["outcome"] == "failed" and "not a node of pool gpu" in stranger["reason"]
    assert not cordoned(kube, "cpu-0")
    for body, status in (({"nodes": []}, 422), ({"nodes": ["Bad_Name"]}, 422), ({"cancel": True}, 422),
                         ({"nodes": ["gpunp-1"], "cancel": "yes"}, 422), ([1], 400)):
        resp = post(r.client, "/api/v1/pools/gpu/repair", body)
        assert resp.status_code == status and "error" in resp.get_json(), (body, resp.get_data(as_text=True))
    assert post(r.client, "/api/v1/pools/nope/repair", {"nodes": ["gpunp-1"]}).status_code == 404
    scale = post(r.client, "/api/v1/pools/gpu/scale", {"action": "repair"})
    assert scale.status_code == 422 and "/repair" in scale.get_json()["error"]


def test_an_alert_that_names_no_node_is_unrouted(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    resp = post(r.client, "/webhook/alertmanager", am_payload(am_alert("GPUNodeUnhealthy", autoscaler_pool="gpu",
                                                                       autoscaler_action="repair")))
    d = resp.get_json()["decisions"][0]
    assert d["outcome"] == "unrouted" and "names its node" in d["reason"], d
    assert kube.calls["PATCH nodes"] == 0


def test_a_scale_in_leaves_a_node_in_repair_to_its_repair(tmp_path: Any, kube: FakeKube,
                                                          receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-3")  # idle, the newest: what an idle scale-in would take first
    resp = post(r.client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "force": True})
    d = resp.get_json()
    assert d["outcome"] == "scaled" and r.last_event()["details"]["nodes"] == ["gpunp-2"], d
    assert cordoned(kube, "gpunp-3") and [x["node"] for x in r.repairs()] == ["gpunp-3"]  # not swept


def test_the_reconciler_uncordons_a_repair_cordon_the_store_does_not_know(tmp_path: Any, kube: FakeKube,
                                                                         receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-2")
    svc = r.app.extensions["autoscaler"]
    svc.store.end_repair("gpu", "gpunp-2", None)  # as a cancel whose uncordon failed leaves it
    assert cordoned(kube, "gpunp-2")
    assert r.tick() == [] and not cordoned(kube, "gpunp-2")


def test_a_pool_at_max_passes_the_replacement_to_its_group(tmp_path: Any, kube: FakeKube,
                                                            receiver: WebhookReceiver) -> None:
    clock = FakeClock(NOW)
    pools = [{"name": "gpu", "provider": "webhook", "min": 1, "max": 4, "node_selector": "agentpool=gpunp",
              "webhook": {"url": receiver.url + "/gpu", "initial_count": 4}, "repair": {}},
             {"name": "spill", "provider": "webhook", "min": 0, "max": 4, "node_selector": "agentpool=spill",
              "webhook": {"url": receiver.url + "/spill", "initial_count": 0}}]
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=pools, groups=[{"name": "a100", "pools": ["gpu", "spill"]}],
                 kubernetes={"host": kube.url, "token": kube.token})
    client = create_app(cfg, clock=clock, startup_check=False).test_client()
    d = repair(client, "gpunp-1")
    assert d["outcome"] == "repair_started" and (d["from"], d["to"]) == (4, 4), d
    assert "at max (4): replacement asked of group a100" in d["reason"]
    assert [(r.path, r.body["from"], r.body["to"]) for r in receiver.received] == [("/spill", 0, 1)]
    assert cordoned(kube, "gpunp-1")


def test_a_rule_or_the_query_routes_to_repair_and_no_cooldown_holds_the_replacement(
        tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    clock = FakeClock(NOW)
    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": receiver.url, "initial_count": 4}, "repair": {"max_unhealthy": 2},
            "scale_out": {"cooldown": "1h"}}
    rules = [{"match": {"alertname": "GPUNodeUnhealthy"}, "pool": "gpu", "action": "repair"}]
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], rules=rules,
                 kubernetes={"host": kube.url, "token": kube.token})
    client = create_app(cfg, clock=clock, startup_check=False).test_client()
    by_rule = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUNodeUnhealthy", node="gpunp-2")))
    assert by_rule.get_json()["decisions"][0]["outcome"] == "repair_started", by_rule.get_json()
    clock.advance(60)  # well inside the scale-out cooldown of 1h
    by_query = post(client, "/webhook/alertmanager?pool=gpu&action=repair",
                    am_payload(am_alert("XidSeen", fingerprint="fp9", node="gpunp-3")))
    d = by_query.get_json()["decisions"][0]
    assert d["outcome"] == "repair_started" and (d["from"], d["to"]) == (5, 6), d
    assert [b["to"] for b in scale_calls(receiver)] == [5, 6]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_autoscaler_nodes_in_repair{pool="gpu"} 2.0' in metrics


def test_a_repair_routed_to_a_group_goes_to_the_member_the_node_is_of(tmp_path: Any, kube: FakeKube,
                                                                      receiver: WebhookReceiver) -> None:
    kube.add_node("spill-0", {"agentpool": "spill"})
    pools = [{"name": "spill", "provider": "webhook", "min": 0, "max": 4, "node_selector": "agentpool=spill",
              "webhook": {"url": receiver.url + "/spill", "initial_count": 1}, "repair": {}},
             {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
              "webhook": {"url": receiver.url + "/gpu", "initial_count": 4}, "repair": {}}]
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=pools, groups=[{"name": "a100", "pools": ["spill", "gpu"]}],
                 kubernetes={"host": kube.url, "token": kube.token})
    client = create_app(cfg, clock=FakeClock(NOW), startup_check=False).test_client()
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(
        "GPUNodeUnhealthy", autoscaler_pool="a100", autoscaler_action="repair", node="gpunp-1")))
    d = resp.get_json()["decisions"][0]
    assert (d["pool"], d["outcome"], d["from"], d["to"]) == ("gpu", "repair_started", 4, 5), d
    assert [r.path for r in receiver.received] == ["/gpu"] and cordoned(kube, "gpunp-1")


def test_repairs_stored_before_repair_was_removed_from_the_config_wait_and_can_be_cancelled(
        tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    repair(r.client, "gpunp-2")
    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": receiver.url, "initial_count": 4}}  # the same store, `repair:` gone
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
    later = Rig(create_app(cfg, clock=r.clock, startup_check=False), r.clock)
    assert later.tick() == [] and cordoned(kube, "gpunp-2")  # not carried on, not swept: its repair is stored
    assert post(later.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-3"]}).status_code == 422
    resp = post(later.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-2"], "cancel": True})
    assert resp.status_code == 200 and not cordoned(kube, "gpunp-2")
    assert later.app.extensions["autoscaler"].store.repairs() == []


def test_a_replacement_the_cloud_first_refused_is_an_event_when_the_reconciler_asks_again(
        tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    """Before: the start's replacement refused (409, another operation in progress) and asked again by the
    reconciler grew the pool 4 -> 5 with no event at all (one INFO log line); now it goes through the door and the
    hold's final write as its own ``scaled`` event."""
    receiver.refuse.append(409)
    r = rig(tmp_path, kube, receiver.url)
    started = repair(r.client, "gpunp-0")  # its Job keeps it (within grace) while the pool grows
    assert started["outcome"] == "repair_started" and "replacement not asked yet" in started["reason"], started
    assert scale_calls(receiver)[-1]["to"] == 5  # asked, and refused
    r.tick()
    events = r.client.get("/api/v1/events?pool=gpu&outcome=scaled", headers=AUTH).get_json()["events"]
    assert [(e["source"], e["action"], e["from"], e["to"]) for e in events] == [("reconcile", "scale_out", 4, 5)]
    assert "replacement for node gpunp-0 in repair asked again: 4 -> 5" in events[0]["reason"]
    r.tick()  # the next tick's view reads the tracked count the event's change stored
    pool = r.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert pool["current"] == 5 and r.repairs()[0]["node"] == "gpunp-0"
    assert [b["to"] for b in scale_calls(receiver)] == [5, 5]  # refused once, asked once more, nothing else
