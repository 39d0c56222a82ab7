"""Operators and permissions: operator actions in the event log, credential scopes, and no cross-site writes."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from autoscaler.config.load import ConfigError, build_settings
from tests.support import HMAC_SECRET, TOKEN, FakeClock, am_alert, am_payload, config, make_app

OPS, READER, HOOK, GPU_OPS = "ops-token-1", "reader-token-2", "hook-token-3", "gpu-ops-token-4"
SCOPED_AUTH: dict[str, Any] = {
    "bearer_tokens": [
        TOKEN,  # the plain form: every scope, every pool
        {"token": OPS, "name": "ops-alice"},
        {"token": READER, "name": "dashboard", "scopes": ["read"]},
        {"token": HOOK, "name": "alertmanager", "scopes": ["webhook"]},
        {"token": GPU_OPS, "name": "gpu-team", "scopes": ["read", "operate"], "pools": ["gpu"]},
    ],
    "basic": [
        {"username": "grafana", "password": "pw-7", "scopes": ["webhook"]},
        {"username": "bob", "password": "pw-8", "name": "bob-ops"},
        {"username": "carol", "password": "pw-9"},
    ],
    "grafana_hmac": {"secret": HMAC_SECRET},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def signed(body: bytes) -> dict[str, str]:
    return {"X-Grafana-Alerting-Signature": hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest(),
            "Content-Type": "application/json"}


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    return make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), server={"auth": SCOPED_AUTH}).test_client()


@pytest.fixture
def plain(tmp_path: Path) -> FlaskClient:
    """The plain credential forms of before scopes: a bearer token and a basic user, each with every scope."""
    return make_app(f"sqlite:///{tmp_path}/p.db", FakeClock()).test_client()


def events(client: FlaskClient, **query: str) -> list[dict[str, Any]]:
    resp = client.get("/api/v1/events", query_string=query, headers=bearer(TOKEN))
    assert resp.status_code == 200, resp.get_json()
    return list(resp.get_json()["events"])


def error_of(resp: Any) -> str:
    body = resp.get_json()
    assert resp.mimetype == "application/json" and isinstance(body["error"], str)
    return str(body["error"])


# -- 11: pause, resume and count corrections are events, with the credential's name ------------------------
def test_operator_actions_are_events_with_the_plain_credentials_names(plain: FlaskClient) -> None:
    assert plain.post("/api/v1/pools/gpu/pause", json={"reason": "driver upgrade"},
                      headers={**bearer(TOKEN), "X-Autoscaler-User": "root"}).status_code == 200
    assert plain.put("/api/v1/pools/gpu/count", json={"count": 5}, headers=basic("grafana", "pw-7")).status_code == 200
    assert plain.post("/api/v1/pools/gpu/resume", json={}, headers=bearer(TOKEN)).status_code == 200
    resume, count, pause = events(plain, pool="gpu")
    assert [e["source"] for e in (pause, count, resume)] == ["operator"] * 3
    assert [e["action"] for e in (pause, count, resume)] == ["pause", "set_count", "resume"]
    assert [e["actor"] for e in (pause, count, resume)] == ["bearer_tokens[0]", "grafana", "bearer_tokens[0]"]
    assert (count["from"], count["to"]) == (2, 5) and "driver upgrade" in pause["reason"]
    assert TOKEN not in json.dumps([pause, count, resume])


def test_pause_resume_and_count_are_operator_events_naming_the_credential(client: FlaskClient) -> None:
    who = {**bearer(OPS), "X-Autoscaler-User": "root"}  # a header anyone can write: noted, never the actor
    assert client.post("/api/v1/pools/gpu/pause", json={"reason": "driver upgrade"}, headers=who).status_code == 200
    assert client.put("/api/v1/pools/gpu/count", json={"count": 4}, headers=basic("bob", "pw-8")).status_code == 200
    resumed = client.post("/api/v1/pools/gpu/resume", json={}, headers=basic("carol", "pw-9"))
    assert resumed.status_code == 200
    resume, count, pause = events(client, pool="gpu")
    assert pause["source"] == "operator" and pause["action"] == "pause" and pause["outcome"] == "paused"
    assert pause["actor"] == "ops-alice" and "driver upgrade" in pause["reason"] and "ops-alice" in pause["reason"]
    assert pause["details"]["on_behalf_of"] == "root"
    assert (count["action"], count["outcome"], count["from"], count["to"]) == ("set_count", "count_corrected", 2, 4)
    assert count["actor"] == "bob-ops" and count["source"] == "operator"
    assert (resume["action"], resume["outcome"], resume["actor"]) == ("resume", "resumed", "carol")
    assert resumed.get_json()["last_event"]["id"] == resume["id"]  # the pool's last event is the resume


def test_manual_scales_name_the_credential_not_the_header(client: FlaskClient) -> None:
    scaled = client.post("/api/v1/pools/gpu/scale", json={"action": "scale_out"},
                         headers={**bearer(OPS), "X-Autoscaler-User": "mallory"}).get_json()
    assert scaled["outcome"] == "scaled" and scaled["reason"].startswith("manual request by ops-alice")


# -- 12: scopes and pools per credential; HMAC is webhook only ---------------------------------------------
@pytest.mark.parametrize(("headers", "method", "path", "status"), [
    pytest.param(bearer(READER), "get", "/api/v1/pools", 200, id="read-may-read"),
    pytest.param(bearer(READER), "post", "/api/v1/pools/gpu/pause", 403, id="read-may-not-pause"),
    pytest.param(bearer(READER), "put", "/api/v1/pools/gpu/count", 403, id="read-may-not-set-count"),
    pytest.param(bearer(READER), "post", "/webhook/alertmanager", 403, id="read-may-not-send-alerts"),
    pytest.param(bearer(HOOK), "post", "/webhook/alertmanager", 200, id="webhook-may-send-alerts"),
    pytest.param(bearer(HOOK), "get", "/api/v1/events", 403, id="webhook-may-not-read"),
    pytest.param(bearer(HOOK), "post", "/api/v1/pools/gpu/scale", 403, id="webhook-may-not-scale-by-hand"),
    pytest.param(basic("grafana", "pw-7"), "post", "/api/v1/pools/gpu/pause", 403, id="basic-webhook-may-not-pause"),
    pytest.param(basic("grafana", "pw-7"), "get", "/", 403, id="basic-webhook-may-not-see-the-page"),
    pytest.param(bearer(GPU_OPS), "post", "/api/v1/pools/gpu/pause", 200, id="pool-scoped-own-pool"),
    pytest.param(bearer(GPU_OPS), "post", "/api/v1/pools/spare/pause", 403, id="pool-scoped-other-pool"),
    pytest.param(bearer(GPU_OPS), "get", "/api/v1/pools/spare", 403, id="pool-scoped-may-not-read-other"),
    pytest.param(bearer(GPU_OPS), "post", "/webhook/grafana", 403, id="pool-scoped-no-webhook-scope"),
])
def test_a_credential_acts_only_within_its_scopes(client: FlaskClient, headers: dict[str, str], method: str,
                                                  path: str, status: int) -> None:
    body = am_payload(am_alert(fingerprint="s1")) if path.startswith("/webhook") else {"action": "scale_out",
                                                                                       "count": 3}
    resp = getattr(client, method)(path, json=body if method != "get" else None, headers=headers)
    assert resp.status_code == status, resp.get_data(as_text=True)
    if status == 403 and path != "/":  # the page answers in HTML
        assert "scope" in error_of(resp) or "pool" in error_of(resp)
    if status == 403:
        assert events(client) == []  # refused before anything acted or was recorded


def test_the_grafana_hmac_signature_may_only_send_webhooks(tmp_path: Path) -> None:
    auth = {"bearer_tokens": [TOKEN], "grafana_hmac": {"secret": HMAC_SECRET}}  # valid before scopes existed
    client = make_app(f"sqlite:///{tmp_path}/h.db", FakeClock(), server={"auth": auth}).test_client()
    body = json.dumps({"reason": "signed"}).encode()
    resp = client.post("/api/v1/pools/gpu/pause", data=body, headers=signed(body))
    assert resp.status_code == 403 and "webhook" in error_of(resp)
    resp = client.put("/api/v1/pools/gpu/count", data=b'{"count": 5}', headers=signed(b'{"count": 5}'))
    assert resp.status_code == 403
    alert = json.dumps({"receiver": "x", "status": "firing", "orgId": 1, "title": "t",
                        "alerts": [am_alert(fingerprint="h1")]}).encode()
    assert client.post("/webhook/grafana", data=alert, headers=signed(alert)).status_code == 200
    assert client.get("/api/v1/pools/gpu", headers=bearer(TOKEN)).get_json()["paused"] is False


def test_pool_scoped_reader_sees_only_its_pools(client: FlaskClient) -> None:
    client.post("/api/v1/pools/spare/pause", json={"reason": "a"}, headers=bearer(TOKEN))
    client.post("/api/v1/pools/gpu/pause", json={"reason": "b"}, headers=bearer(TOKEN))
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="u1", autoscaler_pool="nope")),
                headers=bearer(TOKEN))
    pools = client.get("/api/v1/pools", headers=bearer(GPU_OPS)).get_json()["pools"]
    assert [p["name"] for p in pools] == ["gpu"]
    seen = client.get("/api/v1/events", headers=bearer(GPU_OPS)).get_json()["events"]
    assert [e["pool"] for e in seen] == ["gpu"]
    assert client.get("/api/v1/events?pool=spare", headers=bearer(GPU_OPS)).status_code == 403
    page = client.get("/", headers=bearer(GPU_OPS)).get_data(as_text=True)
    assert page.count('class="pool"') == 1 and page.count('class="event"') == 1


@pytest.mark.parametrize(("entry", "problem"), [
    pytest.param({"token": "t-1", "name": "x", "scopes": ["admin"]}, "scopes", id="unknown-scope"),
    pytest.param({"token": "t-1", "name": "x", "scopes": []}, "scopes", id="no-scope"),
    pytest.param({"token": "t-1", "name": "x", "pools": ["nope"]}, "no pool named 'nope'", id="unknown-pool"),
    pytest.param({"token": "", "name": "x"}, "empty", id="empty-token"),
    pytest.param({"token": "t-1", "name": "bearer_tokens[0]"}, "duplicate", id="duplicate-name"),
    pytest.param({"token": "plain-1", "name": "x", "scopes": ["read"]},
                 "the same token as server.auth.bearer_tokens[0]", id="same-token-twice"),
])
def test_bad_scoped_credentials_are_config_errors(tmp_path: Path, entry: dict[str, Any], problem: str) -> None:
    cfg = config(f"sqlite:///{tmp_path}/s.db", server={"auth": {"bearer_tokens": ["plain-1", entry]}})
    with pytest.raises(ConfigError) as err:
        build_settings(cfg, env={})
    assert problem in str(err.value) and "server.auth.bearer_tokens" in str(err.value)
    assert "plain-1" not in str(err.value) and "t-1" not in str(err.value)  # never a token in a message


# -- 13: state-changing routes take JSON only and refuse other origins -------------------------------------
@pytest.mark.parametrize(("method", "path", "kwargs"), [
    pytest.param("post", "/api/v1/pools/gpu/pause", {"data": {"reason": "x"}}, id="form-body"),
    pytest.param("post", "/api/v1/pools/gpu/pause", {"data": "{}", "content_type": "text/plain"}, id="text-body"),
    pytest.param("post", "/api/v1/pools/gpu/pause", {}, id="empty-body-no-type"),
    pytest.param("post", "/api/v1/pools/gpu/resume", {"data": b"", "content_type": "text/plain"}, id="empty-text"),
    pytest.param("post", "/api/v1/pools/gpu/scale", {"data": '{"action": "scale_out"}'}, id="json-without-type"),
    pytest.param("put", "/api/v1/pools/gpu/count", {"data": '{"count": 4}', "content_type": "text/plain"},
                 id="count-as-text"),
    pytest.param("post", "/api/v1/pools/gpu/scale", {"data": "action=scale_out",
                                                     "content_type": "multipart/form-data; boundary=x"},
                 id="multipart"),
])
def test_state_changing_routes_take_json_only(plain: FlaskClient, method: str, path: str,
                                              kwargs: dict[str, Any]) -> None:
    resp = getattr(plain, method)(path, headers=bearer(TOKEN), **kwargs)
    assert resp.status_code == 415, resp.get_data(as_text=True)
    assert "application/json" in error_of(resp)
    pool = plain.get("/api/v1/pools/gpu", headers=bearer(TOKEN)).get_json()
    assert pool["paused"] is False and pool["current"] == 2 and events(plain) == []


@pytest.mark.parametrize("headers", [
    pytest.param({"Origin": "https://evil.example"}, id="other-origin"),
    pytest.param({"Origin": "http://localhost.evil.example"}, id="lookalike-host"),
    pytest.param({"Origin": "http://localhost:8081"}, id="other-port"),
    pytest.param({"Origin": "null"}, id="opaque-origin"),
    pytest.param({"Sec-Fetch-Site": "cross-site"}, id="fetch-metadata-cross-site"),
])
@pytest.mark.parametrize("path", ["/api/v1/pools/gpu/pause", "/webhook/alertmanager"])
def test_cross_origin_writes_are_refused(plain: FlaskClient, headers: dict[str, str], path: str) -> None:
    body = am_payload(am_alert(fingerprint="x1")) if path.startswith("/webhook") else {"reason": "csrf"}
    resp = plain.post(path, json=body, headers={**basic("grafana", "pw-7"), **headers})
    assert resp.status_code == 403 and "origin" in error_of(resp).lower()
    assert events(plain) == []


def test_same_origin_and_allowed_origins_may_write(tmp_path: Path) -> None:
    server = {"auth": SCOPED_AUTH, "allowed_origins": ["https://ops.example.com"]}
    client = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), server=server).test_client()
    for origin in ("http://localhost", "https://ops.example.com"):
        resp = client.post("/api/v1/pools/gpu/pause", json={}, headers={**bearer(TOKEN), "Origin": origin})
        assert resp.status_code == 200, (origin, resp.get_json())
    assert client.post("/api/v1/pools/gpu/resume", json={},
                       headers={**bearer(TOKEN), "Origin": "https://ops.example.com.evil"}).status_code == 403


def test_webhooks_keep_taking_what_senders_send(plain: FlaskClient) -> None:
    body = json.dumps(am_payload(am_alert(fingerprint="w1")))
    for n, ctype in enumerate(("application/json", "application/json; charset=utf-8", None)):
        data = body.replace("w1", f"w{n}")
        resp = plain.post("/webhook/alertmanager", data=data, content_type=ctype, headers=bearer(TOKEN))
        assert resp.status_code == 200, (ctype, resp.get_json())


def test_a_pool_scoped_webhook_credential_acts_only_on_its_pools(tmp_path: Path) -> None:
    auth = {"bearer_tokens": [TOKEN, {"token": HOOK, "name": "team-gpu-am", "scopes": ["webhook"], "pools": ["gpu"]}]}
    client = make_app(f"sqlite:///{tmp_path}/w.db", FakeClock(), server={"auth": auth}).test_client()
    own = client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="o1")), headers=bearer(HOOK))
    assert own.status_code == 200 and own.get_json()["decisions"][0]["outcome"] == "scaled"
    mixed = am_payload(am_alert(fingerprint="o2"), am_alert(fingerprint="o3", autoscaler_pool="spare"))
    resp = client.post("/webhook/alertmanager", json=mixed, headers=bearer(HOOK))
    assert resp.status_code == 403 and "spare" in error_of(resp)
    assert len(events(client)) == 1  # nothing of the refused notification acted


@pytest.mark.parametrize("status", ["resolved", "firing"])
def test_a_pool_scoped_webhook_credential_writes_no_event_on_another_pool(tmp_path: Path, status: str) -> None:
    """Resolved alerts act on nothing, but they write an ``ignored_resolved`` event on their pool: another pool's
    event log is not the credential's to write either."""
    auth = {"bearer_tokens": [TOKEN, {"token": HOOK, "name": "team-gpu-am", "scopes": ["webhook"], "pools": ["gpu"]}]}
    client = make_app(f"sqlite:///{tmp_path}/w.db", FakeClock(), server={"auth": auth}).test_client()
    body = am_payload(am_alert(fingerprint="r1", status=status, autoscaler_pool="spare",
                               autoscaler_action="scale_out"), status=status)
    resp = client.post("/webhook/alertmanager", json=body, headers=bearer(HOOK))
    assert resp.status_code == 403 and "spare" in error_of(resp)
    assert events(client) == []


def test_decisions_name_the_credential_that_caused_them(client: FlaskClient) -> None:
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="d1")), headers=bearer(HOOK))
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="d1")), headers=basic("grafana", "pw-7"))
    client.post("/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=bearer(OPS))
    alert = json.dumps({"receiver": "x", "status": "firing", "orgId": 1, "title": "t",
                        "alerts": [am_alert("Other", fingerprint="d2", autoscaler_pool="nope")]}).encode()
    client.post("/webhook/grafana", data=alert, headers=signed(alert))
    unrouted, manual, duplicate, scaled = events(client)
    assert (scaled["outcome"], scaled["actor"]) == ("scaled", "alertmanager")
    assert (duplicate["outcome"], duplicate["actor"]) == ("skipped_duplicate", "grafana")
    assert (manual["source"], manual["actor"]) == ("manual", "ops-alice")
    assert (unrouted["outcome"], unrouted["actor"]) == ("unrouted", "grafana_hmac")


def test_openapi_names_the_scope_of_each_operation(tmp_path: Path) -> None:
    auth = {"bearer_tokens": [TOKEN], "grafana_hmac": {"secret": HMAC_SECRET}}
    doc = make_app(f"sqlite:///{tmp_path}/o.db", FakeClock(), server={"auth": auth}).test_client() \
        .get("/openapi.json").get_json()
    paths = doc["paths"]
    assert paths["/api/v1/pools/{pool}/pause"]["post"]["security"] == [{"bearerAuth": ["operate"]},
                                                                        {"basicAuth": ["operate"]}]
    assert paths["/api/v1/events"]["get"]["security"] == [{"bearerAuth": ["read"]}, {"basicAuth": ["read"]}]
    assert {"grafanaHmac": ["webhook"]} in paths["/webhook/grafana"]["post"]["security"]
    assert paths["/healthz"]["get"]["security"] == []
    for route in ("/api/v1/pools/{pool}/scale", "/api/v1/pools/{pool}/count", "/webhook/alertmanager"):
        assert "403" in next(iter(paths[route].values()))["responses"], route
