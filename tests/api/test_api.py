"""The HTTP API as the contract writes it, through the Flask test client."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any, Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import AUTH, TOKEN, FakeClock, am_alert, am_payload, events, post

# -- health and auth ----------------------------------------------------------------------------------------
def test_probes_and_metrics_need_no_auth(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").get_json() == {"status": "ready"}
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_autoscaler_pool_size{pool="gpu"} 2.0' in text


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="none"),
    pytest.param({"Authorization": "Bearer wrong"}, id="wrong-token"),
    pytest.param({"Authorization": "Bearer "}, id="empty-token"),
    pytest.param({"Authorization": f"Token {TOKEN}"}, id="wrong-scheme"),
    pytest.param({"Authorization": "Bearer " + "x" * 20000}, id="very-long"),
])
@pytest.mark.parametrize("path", ["/webhook/alertmanager", "/webhook/grafana", "/api/v1/pools/gpu/scale"])
def test_auth_required(client: FlaskClient, headers: dict[str, str], path: str) -> None:
    resp = client.post(path, json=am_payload(), headers=headers)
    assert resp.status_code == 401
    assert "error" in resp.get_json()
    assert TOKEN not in resp.get_data(as_text=True)
    assert events(client) == []  # nothing acted on, nothing recorded


def test_get_routes_need_auth(client: FlaskClient) -> None:
    for path in ("/api/v1/pools", "/api/v1/pools/gpu", "/api/v1/events"):
        assert client.get(path).status_code == 401


def test_basic_auth(make_app: Callable[..., Flask]) -> None:
    app = make_app(server={"auth": {"basic": [{"username": "grafana", "password": "s3cret"}]}})
    client = app.test_client()
    good = base64.b64encode(b"grafana:s3cret").decode()
    bad = base64.b64encode(b"grafana:nope").decode()
    assert client.get("/api/v1/pools", headers={"Authorization": f"Basic {good}"}).status_code == 200
    assert client.get("/api/v1/pools", headers={"Authorization": f"Basic {bad}"}).status_code == 401
    assert client.get("/api/v1/pools", headers={"Authorization": "Basic !!notbase64"}).status_code == 401


def test_grafana_hmac(make_app: Callable[..., Flask], clock: FakeClock) -> None:
    hm = {"secret": "hmac-key", "timestamp_header": "X-Grafana-Alerting-Timestamp", "max_skew": "5m"}
    client = make_app(server={"auth": {"grafana_hmac": hm}}).test_client()
    body = json.dumps(am_payload()).encode()

    def send(stamp: str, sig: str) -> int:
        headers = {"Content-Type": "application/json", "X-Grafana-Alerting-Signature": sig,
                   "X-Grafana-Alerting-Timestamp": stamp}
        return client.post("/webhook/grafana", data=body, headers=headers).status_code

    def sign(stamp: str, payload: bytes = body) -> str:
        return hmac.new(b"hmac-key", stamp.encode() + b":" + payload, hashlib.sha256).hexdigest()

    now = str(int(clock.now))
    assert send(now, sign(now)) == 200
    assert send(now, sign(now, b"{}")) == 401  # signature of another body
    old = str(int(clock.now) - 600)
    assert send(old, sign(old)) == 401  # outside max_skew: a replay
    body_only = make_app(server={"auth": {"grafana_hmac": {"secret": "hmac-key"}}}).test_client()
    sig = hmac.new(b"hmac-key", body, hashlib.sha256).hexdigest()
    resp = body_only.post("/webhook/grafana", data=body, headers={"Content-Type": "application/json",
                                                                  "X-Grafana-Alerting-Signature": sig})
    assert resp.status_code == 200


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data,ctype,status", [
    pytest.param(b"{not json", "application/json", 400, id="malformed"),
    pytest.param(b"", "application/json", 400, id="empty"),
    pytest.param(b"\xff\xfe", "application/json", 400, id="not-utf8"),
    pytest.param(b"[" * 100000 + b"]" * 100000, "application/json", 400, id="deeply-nested"),
    pytest.param(b"[1, 2]", "application/json", 400, id="array"),
    pytest.param(b"alerts=1", "application/x-www-form-urlencoded", 415, id="form"),
    pytest.param(b'{"version": "4"}', "application/json", 422, id="no-alerts"),
    pytest.param(b'{"alerts": [{"labels": 5}]}', "application/json", 422, id="bad-labels"),
])
def test_bad_webhook_bodies(client: FlaskClient, data: bytes, ctype: str, status: int) -> None:
    resp = client.post("/webhook/alertmanager", data=data, headers={**AUTH, "Content-Type": ctype})
    assert resp.status_code == status
    assert isinstance(resp.get_json()["error"], str)
    assert events(client) == []


def test_body_limit(make_app: Callable[..., Flask]) -> None:
    client = make_app(server={"auth": {"bearer_tokens": [TOKEN]}, "max_body_bytes": 2048}).test_client()
    big = am_payload(*[am_alert(fingerprint=str(i)) for i in range(50)])
    resp = post(client, "/webhook/alertmanager", big)
    assert resp.status_code == 413 and "max_body_bytes" in resp.get_json()["error"]


def test_bad_query_parameters(client: FlaskClient) -> None:
    assert post(client, "/webhook/grafana?pool=gpu&action=grow", am_payload()).status_code == 422
    assert post(client, "/webhook/grafana?pool=gpu&action=scale_out&step=0", am_payload()).status_code == 422


def test_method_and_route_errors(client: FlaskClient) -> None:
    resp = client.get("/webhook/alertmanager", headers=AUTH)
    assert resp.status_code == 405 and resp.get_json()["error"]
    resp = client.get("/nothing-here")
    assert resp.status_code == 404 and resp.get_json()["error"]


@pytest.mark.parametrize("body,status", [
    pytest.param({"action": "scale_out", "step": 0}, 422, id="step-zero"),
    pytest.param({"action": "grow"}, 422, id="unknown-action"),
    pytest.param({}, 422, id="nothing"),
    pytest.param({"action": "scale_out", "target": 3}, 422, id="both"),
    pytest.param({"target": -1}, 422, id="negative-target"),
    pytest.param({"action": "scale_out", "step": "2"}, 422, id="step-as-string"),
    pytest.param({"action": "scale_out", "force": "yes"}, 422, id="force-not-bool"),
])
def test_bad_manual_bodies(client: FlaskClient, body: dict[str, Any], status: int) -> None:
    resp = post(client, "/api/v1/pools/gpu/scale", body)
    assert resp.status_code == status
    assert resp.get_json()["error"]


def test_unknown_pool_manual_is_404(client: FlaskClient) -> None:
    for method, path in (("post", "/api/v1/pools/nope/scale"), ("post", "/api/v1/pools/nope/pause"),
                         ("get", "/api/v1/pools/nope"), ("put", "/api/v1/pools/nope/count")):
        resp = getattr(client, method)(path, json={"action": "scale_out"}, headers=AUTH)
        assert resp.status_code == 404, path
        assert "nope" in resp.get_json()["error"]


def test_create_app_takes_a_mapping_or_a_path(tmp_path: Any) -> None:
    import yaml

    from autoscaler.app import create_app
    from tests.support import BASE_CONFIG

    cfg = {**BASE_CONFIG, "store": {"url": f"sqlite:///{tmp_path}/m.db"}}
    assert create_app(cfg).test_client().get("/api/v1/pools", headers=AUTH).status_code == 200
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert create_app(path).test_client().get("/api/v1/pools/gpu", headers=AUTH).get_json()["current"] == 2
