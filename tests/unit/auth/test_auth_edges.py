"""Hostile and odd input: HMAC replay, bad schemes, huge headers, Unicode, nesting, duplicates, 10,000 alerts."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from tests.support import AUTH, HMAC_SECRET, TOKEN, FakeClock, am_alert, am_payload, config, make_app

HMAC_AUTH = {"bearer_tokens": [TOKEN], "basic": [{"username": "grafana", "password": "pw-7"}],
             "grafana_hmac": {"secret": HMAC_SECRET, "header": "X-Grafana-Alerting-Signature",
                              "timestamp_header": "X-Grafana-Alerting-Timestamp", "max_skew": "5m"}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client(tmp_path: Path, clock: FakeClock) -> FlaskClient:
    return make_app(f"sqlite:///{tmp_path}/s.db", clock, server={"auth": HMAC_AUTH}).test_client()


def signed(body: bytes, stamp: str, secret: str = HMAC_SECRET) -> dict[str, str]:
    sig = hmac.new(secret.encode(), stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Grafana-Alerting-Signature": sig, "X-Grafana-Alerting-Timestamp": stamp,
            "Content-Type": "application/json"}


def grafana_body(fp: str = "g1") -> bytes:
    return json.dumps({"receiver": "x", "status": "firing", "orgId": 1, "title": "t",
                       "alerts": [am_alert("Other", fingerprint=fp)]}).encode()


def error_of(resp: Any) -> str:
    body = resp.get_json()
    assert isinstance(body, dict) and isinstance(body["error"], str)
    return str(body["error"])


def test_hmac_signature_is_accepted_once(client: FlaskClient, clock: FakeClock) -> None:
    body = grafana_body()
    headers = signed(body, str(int(clock())))
    first = client.post("/webhook/grafana", data=body, headers=headers)
    assert first.status_code == 200, first.get_json()
    replay = client.post("/webhook/grafana", data=body, headers=headers)
    assert replay.status_code == 401 and "replay" in error_of(replay)
    clock.advance(1)  # a fresh delivery of the same body carries a new timestamp and signature
    assert client.post("/webhook/grafana", data=body, headers=signed(body, str(int(clock())))).status_code == 200


def test_hmac_replay_guard_holds_across_app_instances(tmp_path: Path, clock: FakeClock) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"  # two workers/replicas sharing one store
    one = make_app(url, clock, server={"auth": HMAC_AUTH}).test_client()
    two = make_app(url, clock, server={"auth": HMAC_AUTH}).test_client()
    body = grafana_body()
    headers = signed(body, str(int(clock() * 1000)))  # milliseconds are accepted too
    assert one.post("/webhook/grafana", data=body, headers=headers).status_code == 200
    assert two.post("/webhook/grafana", data=body, headers=headers).status_code == 401


@pytest.mark.parametrize("offset", [-301, 301], ids=["old", "future"])
def test_hmac_timestamp_outside_window(client: FlaskClient, clock: FakeClock, offset: int) -> None:
    body = grafana_body()
    resp = client.post("/webhook/grafana", data=body, headers=signed(body, str(int(clock()) + offset)))
    assert resp.status_code == 401 and "window" in error_of(resp)


@pytest.mark.parametrize("headers", [
    pytest.param({"X-Grafana-Alerting-Timestamp": "1800000000", "X-Grafana-Alerting-Signature": "00" * 32},
                 id="wrong-signature"),
    pytest.param({"X-Grafana-Alerting-Signature": "abc"}, id="no-timestamp"),
    pytest.param({"X-Grafana-Alerting-Signature": "abc", "X-Grafana-Alerting-Timestamp": "yesterday"},
                 id="timestamp-not-a-number"),
    pytest.param({"X-Grafana-Alerting-Signature": "abc", "X-Grafana-Alerting-Timestamp": "nan"}, id="nan"),
    pytest.param({"X-Grafana-Alerting-Signature": "abc", "X-Grafana-Alerting-Timestamp": "1e999"}, id="inf"),
    pytest.param({"Authorization": "Token " + TOKEN}, id="wrong-scheme"),
    pytest.param({"Authorization": "Bearer "}, id="empty-token"),
    pytest.param({"Authorization": "Bearer"}, id="scheme-only"),
    pytest.param({"Authorization": ""}, id="empty-header"),
    pytest.param({"Authorization": "Basic !!!notbase64"}, id="bad-base64"),
    pytest.param({"Authorization": "Basic " + base64.b64encode(b"grafana").decode()}, id="basic-no-colon"),
    pytest.param({"Authorization": "Basic " + base64.b64encode(b"grafana:pw-7\xff").decode()}, id="basic-wrong"),
    pytest.param({"Authorization": "Bearer " + TOKEN + "x"}, id="token-prefix"),
    pytest.param({"Authorization": "Bearer " + "é" * 10}, id="unicode-token"),
    pytest.param({"Authorization": "Bearer " + "a" * 9000}, id="very-long-token"),
    pytest.param({"X-Grafana-Alerting-Signature": "a" * 9000, "X-Grafana-Alerting-Timestamp": "1800000000"},
                 id="very-long-signature"),
])
def test_bad_credentials_are_401_json(client: FlaskClient, headers: dict[str, str]) -> None:
    resp = client.post("/webhook/grafana", data=grafana_body(), headers={"Content-Type": "application/json",
                                                                         **headers})
    assert resp.status_code == 401
    assert "WWW-Authenticate" in resp.headers
    message = error_of(resp)
    assert TOKEN not in message and HMAC_SECRET not in message and "pw-7" not in message


def test_default_body_limit_answers_413(client: FlaskClient) -> None:
    alerts = [am_alert("GPUUtilizationHigh", fingerprint=f"fp{i:05d}") for i in range(6000)]
    resp = client.post("/webhook/alertmanager", json=am_payload(*alerts), headers=AUTH)
    assert resp.status_code == 413 and error_of(resp)


def test_basic_auth_works(client: FlaskClient) -> None:
    basic = "Basic " + base64.b64encode(b"grafana:pw-7").decode()
    assert client.get("/api/v1/pools", headers={"Authorization": basic}).status_code == 200


def test_unicode_in_labels_and_pool_names(client: FlaskClient) -> None:
    alert = am_alert("GPU🔥Höhe", fingerprint="ü1", autoscaler_pool="gpu-ä", autoscaler_action="scale_out",
                     team="研究")
    resp = client.post("/webhook/alertmanager", json=am_payload(alert), headers=AUTH)
    assert resp.status_code == 200
    decision = resp.get_json()["decisions"][0]
    assert decision["outcome"] == "unknown_pool" and "gpu-ä" in decision["reason"]
    assert client.get("/api/v1/pools/gpu-ä", headers=AUTH).status_code == 404
    assert client.post("/api/v1/pools/%F0%9F%94%A5/scale", json={"action": "scale_out"},
                       headers=AUTH).status_code == 404
    events = client.get("/api/v1/events?pool=gpu-ä", headers=AUTH).get_json()["events"]
    assert events[0]["alerts"][0]["alertname"] == "GPU🔥Höhe"
    resp = client.post("/api/v1/pools/gpu/pause", json={"reason": "Wartung 🛠"}, headers=AUTH)
    assert resp.get_json()["pause_reason"] == "Wartung 🛠"


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json_is_400(client: FlaskClient, depth: int) -> None:
    body = '{"alerts": ' + "[" * depth + "]" * depth + "}"
    resp = client.post("/webhook/alertmanager", data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 400 and error_of(resp) == "body is nested too deeply"


def test_duplicate_keys_last_one_wins(client: FlaskClient) -> None:
    body = '{"action": "scale_in", "action": "scale_out", "step": 1}'
    resp = client.post("/api/v1/pools/gpu/scale", data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 200 and resp.get_json()["action"] == "scale_out"


@pytest.mark.parametrize("path,body", [
    ("/api/v1/pools/gpu/scale", {"action": "scale_out", "step": "2"}),
    ("/api/v1/pools/gpu/scale", {"target": "3"}),
    ("/api/v1/pools/gpu/scale", {"action": "scale_out", "force": "true"}),
    ("/api/v1/pools/gpu/scale", {"action": "scale_out", "step": 2.5}),
], ids=["step", "target", "force", "fractional-step"])
def test_numbers_as_strings_in_the_manual_api_are_422(client: FlaskClient, path: str, body: dict[str, Any]) -> None:
    resp = client.post(path, json=body, headers=AUTH)
    assert resp.status_code == 422 and error_of(resp)


def test_numbers_as_strings_in_alert_labels_are_read(client: FlaskClient) -> None:
    alert = am_alert("Load", fingerprint="n1", autoscaler_pool="gpu", autoscaler_action="scale_out")
    alert["labels"]["autoscaler_step"] = 2  # a number where Alertmanager sends strings
    alert["annotations"]["value"] = 97.5
    payload = {**am_payload(alert), "truncatedAlerts": "0"}
    resp = client.post("/webhook/alertmanager", json=payload, headers=AUTH)
    assert resp.status_code == 200
    assert resp.get_json()["decisions"][0]["to"] == 4  # 2 + step 2


def test_step_label_out_of_range_is_unrouted_not_an_error(client: FlaskClient) -> None:
    alert = am_alert("Load", fingerprint="n2", autoscaler_pool="gpu", autoscaler_action="scale_out",
                     autoscaler_step="99999999999999999999")
    resp = client.post("/webhook/alertmanager", json=am_payload(alert), headers=AUTH)
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "unrouted"


def test_ten_thousand_alerts_in_one_notification(tmp_path: Path, record_property: Any) -> None:
    server = {"auth": HMAC_AUTH, "max_body_bytes": 8 * 1024 * 1024}  # 10,000 alerts are ~2.5 MiB
    client = make_app(f"sqlite:///{tmp_path}/big.db", FakeClock(), server=server).test_client()
    alerts = [am_alert("GPUUtilizationHigh", fingerprint=f"fp{i:05d}", instance=f"node-{i}") for i in range(10_000)]
    body = json.dumps(am_payload(*alerts)).encode()
    assert len(body) < 4 * 1024 * 1024
    tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.thread_time()
    resp = client.post("/webhook/alertmanager", data=body, headers={**AUTH, "Content-Type": "application/json"})
    # The bound is on this thread's CPU time (the test client handles the request on it): wall time measures the
    # machine's other tenants as much as this code.
    elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    record_property("seconds", round(elapsed, 2))
    record_property("cpu_seconds", round(cpu, 2))
    record_property("peak_mib", round(peak / 2**20, 1))
    print(f"10,000 alerts: {len(body) / 2**20:.1f} MiB body, {elapsed:.2f}s ({cpu:.2f}s CPU), "
          f"peak {peak / 2**20:.1f} MiB traced")
    assert resp.status_code == 200, resp.get_json()
    answer = resp.get_json()
    assert answer["received"] == 10_000
    assert [d["outcome"] for d in answer["decisions"]] == ["scaled"]  # one decision for the whole group
    assert cpu < 10 and peak < 200 * 2**20
    event = client.get("/api/v1/events?limit=1", headers=AUTH).get_json()["events"][0]
    # every alert ends up in exactly one event: the first 100 listed, the rest counted (issue 24 item 6: an event,
    # a log line and an answer stay bounded however many alerts a notification carries)
    assert len(event["alerts"]) == 100 and event["details"]["alerts_not_listed"] == 9_900
    assert [a["fingerprint"] for a in event["alerts"]] == [f"fp{i:05d}" for i in range(100)]
    again = client.post("/webhook/alertmanager", data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert [d["outcome"] for d in again.get_json()["decisions"]] == ["skipped_duplicate"]


@pytest.mark.slow
def test_very_long_headers_on_real_gunicorn(tmp_path: Path) -> None:
    import yaml

    from tests.support.servers import Service

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(f"sqlite:///{tmp_path}/s.db")))
    with Service(None, tmp_path, workers=1, env={"AUTOSCALER_CONFIG": str(path)}, graceful_timeout=2) as server:
        statuses = []
        for value in ("Bearer " + "a" * 8000, "Bearer " + "a" * 9000, "Bearer " + "a" * 70_000):
            try:
                resp = requests.get(f"{server.url}/api/v1/pools", headers={"Authorization": value}, timeout=5)
                statuses.append(resp.status_code)
            except requests.ConnectionError:
                statuses.append(0)  # the server may close the connection on a huge header
        many = {f"X-Pad-{i}": "x" for i in range(200)}
        resp = requests.get(f"{server.url}/api/v1/pools", headers={**AUTH, **many}, timeout=5)
        statuses.append(resp.status_code)
    print("long header answers:", statuses)
    assert statuses[0] == 401
    assert all(s in (0, 400, 401, 431) for s in statuses), statuses  # never 5xx
