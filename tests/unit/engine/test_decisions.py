"""Alerts in, decisions out: the webhook and manual flows against the simulated cloud."""
from __future__ import annotations

import json
from typing import Any, Callable

from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from providers import Code, PermanentError, TemporaryError
from tests.support.fakes.scripted_cloud import ScriptedCloud
from tests.support import AUTH, OUTCOMES, FakeClock, am_alert, am_payload, events, post


def decisions(resp: Any) -> list[tuple[str | None, str | None, str]]:
    return [(d["pool"], d["action"], d["outcome"]) for d in resp.get_json()["decisions"]]


def pool(client: FlaskClient, name: str = "gpu") -> dict[str, Any]:
    return client.get(f"/api/v1/pools/{name}", headers=AUTH).get_json()


def test_scale_out_then_cooldown_then_again(client: FlaskClient, clock: FakeClock) -> None:
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="a")))
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["received"] == 1
    (d,) = body["decisions"]
    assert (d["outcome"], d["from"], d["to"]) == ("scaled", 2, 3)
    assert isinstance(d["event_id"], int) and d["reason"]
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="b")))
    assert decisions(resp) == [("gpu", "scale_out", "skipped_cooldown")]
    assert pool(client)["cooldown"]["scale_out_remaining_s"] == 300
    clock.advance(301)
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="c")))
    assert resp.get_json()["decisions"][0]["to"] == 4
    assert pool(client)["current"] == 4


def test_duplicate_delivery_acts_once_until_window_ends(client: FlaskClient, clock: FakeClock) -> None:
    body = am_payload(am_alert(fingerprint="same"))
    assert decisions(post(client, "/webhook/alertmanager", body))[0][2] == "scaled"
    assert decisions(post(client, "/webhook/alertmanager", body))[0][2] == "skipped_duplicate"
    clock.advance(601)  # dedup window over; the cooldown is too
    assert decisions(post(client, "/webhook/alertmanager", body))[0][2] == "scaled"


def test_one_decision_per_pool_and_action_and_every_alert_in_one_event(client: FlaskClient) -> None:
    body = am_payload(
        am_alert("GPUUtilizationHigh", fingerprint="1"),
        am_alert("GPUUtilizationHigh", fingerprint="2", gpu="1"),
        am_alert("Other", fingerprint="3", autoscaler_pool="spare", autoscaler_action="scale_out", autoscaler_step="2"),
        am_alert("GPUUtilizationHigh", status="resolved", fingerprint="4"),
        am_alert("NoRoute", fingerprint="5"),
        am_alert("Ghost", fingerprint="6", autoscaler_pool="ghost", autoscaler_action="scale_out"),
    )
    resp = post(client, "/webhook/alertmanager", body)
    assert resp.status_code == 200
    got = resp.get_json()
    assert got["received"] == 6
    assert sorted(decisions(resp), key=str) == sorted([
        ("gpu", "scale_out", "scaled"), ("spare", "scale_out", "scaled"), ("gpu", "scale_out", "ignored_resolved"),
        (None, None, "unrouted"), ("ghost", "scale_out", "unknown_pool")], key=str)
    spare = next(d for d in got["decisions"] if d["pool"] == "spare")
    assert (spare["from"], spare["to"]) == (0, 2)  # the step label
    logged = events(client)
    assert len(logged) == 5
    fingerprints = sorted(a["fingerprint"] for e in logged for a in e["alerts"])
    assert fingerprints == ["1", "2", "3", "4", "5", "6"]
    assert {e["outcome"] for e in logged} <= OUTCOMES
    assert all(e["time"].endswith("Z") for e in logged)


def test_scale_in_waits_for_delay_after_scale_out(client: FlaskClient, clock: FakeClock) -> None:
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="out")))
    low = am_alert("GPUUtilizationLow", fingerprint="low")
    assert decisions(post(client, "/webhook/alertmanager", am_payload(low)))[0][2] == "skipped_cooldown"
    clock.advance(601)
    low["startsAt"] = "2026-11-21T11:00:00Z"
    resp = post(client, "/webhook/alertmanager", am_payload(low))
    assert decisions(resp)[0] == ("gpu", "scale_in", "scaled")
    assert pool(client)["current"] == 2


def test_grafana_test_notification_never_acts(client: FlaskClient) -> None:
    body = am_payload(am_alert("TestAlert", instance="Grafana", autoscaler_pool="gpu",
                               autoscaler_action="scale_out"))
    body["version"] = "1"
    resp = post(client, "/webhook/grafana", body)
    assert decisions(resp) == [("gpu", None, "ignored_test")]
    assert pool(client)["current"] == 2


def test_grafana_legacy_channel_per_action(client: FlaskClient) -> None:
    legacy = {"ruleId": 3, "ruleName": "GPU Usage", "state": "alerting", "tags": None,
              "evalMatches": [{"value": 50, "metric": "gpu", "tags": None}], "title": "[Alerting] GPU Usage"}
    resp = post(client, "/webhook/grafana?pool=gpu&action=scale_out&step=2", legacy)
    assert decisions(resp) == [("gpu", "scale_out", "scaled")]
    assert resp.get_json()["decisions"][0]["to"] == 4
    assert events(client)[0]["source"] == "grafana_legacy"
    legacy["state"] = "ok"
    assert decisions(post(client, "/webhook/grafana?pool=gpu&action=scale_out", legacy))[0][2] == "ignored_resolved"
    legacy["state"] = "no_data"
    assert decisions(post(client, "/webhook/grafana?pool=gpu&action=scale_out", legacy))[0][2] == "ignored_resolved"


def test_manual_scale_target_force_and_pause(client: FlaskClient) -> None:
    resp = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_out", "step": 2, "reason": "training run"})
    d = resp.get_json()
    assert resp.status_code == 200 and (d["outcome"], d["from"], d["to"]) == ("scaled", 2, 4)
    assert "training run" in d["reason"]
    assert post(client, "/api/v1/pools/gpu/scale", {"target": 5}).get_json()["outcome"] == "skipped_cooldown"
    d = post(client, "/api/v1/pools/gpu/scale", {"target": 5, "force": True}).get_json()
    assert (d["outcome"], d["to"]) == ("scaled", 5)
    d = post(client, "/api/v1/pools/gpu/scale", {"target": 50, "force": True}).get_json()
    assert (d["outcome"], d["to"]) == ("scaled", 6)  # clamped to max even when forced
    paused = post(client, "/api/v1/pools/gpu/pause", {"reason": "driver upgrade"}).get_json()
    assert paused["paused"] is True and paused["pause_reason"] == "driver upgrade"
    d = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "force": True}).get_json()
    assert d["outcome"] == "skipped_paused" and "driver upgrade" in d["reason"]
    assert decisions(post(client, "/webhook/alertmanager", am_payload()))[0][2] == "skipped_paused"
    resumed = client.post("/api/v1/pools/gpu/resume", json={}, headers=AUTH).get_json()
    assert resumed["paused"] is False
    assert pool(client)["last_event"]["outcome"] == "resumed"  # the operator's resume is the pool's last event
    assert [e["outcome"] for e in events(client)[:4]] == ["resumed", "skipped_paused", "skipped_paused", "paused"]


def test_pool_answer_shape(client: FlaskClient) -> None:
    pools = client.get("/api/v1/pools", headers=AUTH).get_json()["pools"]
    assert [p["name"] for p in pools] == ["gpu", "spare"]
    gpu = pools[0]
    for key in ("name", "provider", "current", "min", "max", "paused", "busy", "dry_run", "cooldown", "last_event"):
        assert key in gpu
    assert gpu["cooldown"] == {"scale_out_remaining_s": 0.0, "scale_in_remaining_s": 0.0}
    assert (gpu["current"], gpu["min"], gpu["max"], gpu["busy"], gpu["last_event"]) == (2, 1, 6, False, None)


def test_count_correction(client: FlaskClient) -> None:
    resp = client.put("/api/v1/pools/gpu/count", json={"count": 5}, headers=AUTH)
    assert resp.status_code == 200 and resp.get_json()["current"] == 5
    assert client.put("/api/v1/pools/gpu/count", json={"count": -1}, headers=AUTH).status_code == 422


def test_events_filter_and_limit(client: FlaskClient, clock: FakeClock) -> None:
    for i in range(3):
        post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint=f"x{i}")))
        clock.advance(1)
    post(client, "/api/v1/pools/spare/scale", {"action": "scale_out"})
    assert [e["pool"] for e in events(client, limit="2")] == ["spare", "gpu"]
    gpu = events(client, pool="gpu")
    assert len(gpu) == 3 and gpu[0]["id"] > gpu[1]["id"]  # newest first
    assert client.get("/api/v1/events?limit=0", headers=AUTH).status_code == 400
    assert client.get("/api/v1/events?limit=abc", headers=AUTH).status_code == 400


def test_simulated_provision_time_makes_pool_busy(make_app: Callable[..., Flask], raw_config: dict[str, Any],
                                                  clock: FakeClock) -> None:
    raw_config["pools"][0]["simulated"]["provision_seconds"] = "2m"
    raw_config["pools"][0]["scale_out"] = {"cooldown": 0}
    client = make_app(pools=raw_config["pools"]).test_client()
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="1")))
    assert pool(client)["busy"] is True
    assert decisions(post(client, "/webhook/alertmanager",
                          am_payload(am_alert(fingerprint="2"))))[0][2] == "skipped_busy"
    clock.advance(121)
    assert decisions(post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="3"))))[0][2] == "scaled"


def test_dry_run_changes_nothing(make_app: Callable[..., Flask], raw_config: dict[str, Any]) -> None:
    raw_config["pools"][0]["dry_run"] = True
    client = make_app(pools=raw_config["pools"]).test_client()
    d = post(client, "/webhook/alertmanager", am_payload()).get_json()["decisions"][0]
    assert (d["outcome"], d["from"], d["to"]) == ("dry_run", 2, 3)
    assert "would scale out" in d["reason"]
    assert pool(client)["current"] == 2 and pool(client)["dry_run"] is True


def scripted_app(raw_config: dict[str, Any], clock: FakeClock, cloud: ScriptedCloud) -> FlaskClient:
    settings = build_settings(raw_config, env={})
    return create_app(settings, clock=clock, providers={"gpu": cloud}).test_client()


def test_failure_backoff_retry_after_and_recovery(raw_config: dict[str, Any], clock: FakeClock) -> None:
    cloud = ScriptedCloud(count=2)
    cloud.failures = [TemporaryError("throttled", code=Code.THROTTLED, cloud_code="429"),
                      TemporaryError("still throttled", code=Code.THROTTLED, cloud_code="429")]
    client = scripted_app(raw_config, clock, cloud)
    body = am_payload(am_alert(fingerprint="hot"))
    resp = post(client, "/webhook/alertmanager", body)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "60"
    d = resp.get_json()["decisions"][0]
    assert d["outcome"] == "failed" and "[429]" in d["reason"] and "backing off 60s" in d["reason"]
    # the retry of the same notification is not a duplicate, but the pool is backing off
    resp = post(client, "/webhook/alertmanager", body)
    assert resp.status_code == 503 and decisions(resp)[0][2] == "skipped_backoff"
    assert pool(client)["cooldown"]["scale_out_remaining_s"] == 0  # a failure starts no cooldown
    clock.advance(61)
    resp = post(client, "/webhook/alertmanager", body)
    assert resp.status_code == 503 and "backing off 120s (failure 2)" in resp.get_json()["decisions"][0]["reason"]
    clock.advance(121)
    resp = post(client, "/webhook/alertmanager", body)
    assert resp.status_code == 200 and decisions(resp)[0][2] == "scaled"
    assert pool(client)["failures"] == 0 and cloud.count == 3
    assert [c for c in cloud.calls] == [(2, 3), (2, 3), (2, 3)]


def test_permanent_failure_answers_200(raw_config: dict[str, Any], clock: FakeClock) -> None:
    cloud = ScriptedCloud(count=2)
    cloud.failures = [PermanentError("InvalidParameter: bad count", cloud_code="InvalidParameter")]
    client = scripted_app(raw_config, clock, cloud)
    resp = post(client, "/webhook/alertmanager", am_payload())
    assert resp.status_code == 200 and decisions(resp)[0][2] == "failed"
    d = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_out", "force": True}).get_json()
    assert d["outcome"] == "scaled"  # force skips the backoff


def test_count_is_409_for_a_cloud_that_reports_it(raw_config: dict[str, Any], clock: FakeClock) -> None:
    cloud = ScriptedCloud(count=2)
    client = scripted_app(raw_config, clock, cloud)
    resp = client.put("/api/v1/pools/gpu/count", json={"count": 3}, headers=AUTH)
    assert resp.status_code == 409 and resp.get_json()["error"]
    cloud.busy = True
    assert decisions(post(client, "/webhook/alertmanager", am_payload()))[0][2] == "skipped_busy"
    assert pool(client)["busy"] is True and pool(client)["count_source"] == "cloud"


def test_state_survives_restart(make_app: Callable[..., Flask]) -> None:
    first = make_app().test_client()
    post(first, "/webhook/alertmanager", am_payload(am_alert(fingerprint="r")))
    post(first, "/api/v1/pools/spare/pause", {"reason": "x"})
    second = make_app().test_client()
    assert pool(second)["current"] == 3
    assert pool(second)["cooldown"]["scale_out_remaining_s"] == 300
    assert pool(second, "spare")["paused"] is True
    assert decisions(post(second, "/webhook/alertmanager", am_payload(am_alert(fingerprint="r"))))[0][2] == \
        "skipped_duplicate"
    assert [e["outcome"] for e in events(second)] == ["skipped_duplicate", "paused", "scaled"]


def test_metrics_count_decisions(client: FlaskClient) -> None:
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="m")))
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="m")))
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_autoscaler_decisions_total{action="scale_out",outcome="scaled",pool="gpu"} 1.0' in text
    assert 'gpu_autoscaler_decisions_total{action="scale_out",outcome="skipped_duplicate",pool="gpu"} 1.0' in text
    assert json.loads(json.dumps(text))  # plain text body
