"""Every sample body in tests/support/payloads through the real webhook endpoints, with the outcomes each must give."""
from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from tests.support import FakeClock

PAYLOADS = Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads"
TOKEN = "corpus-token"
HMAC_SECRET = "grafana-hmac-secret"
NOW = 1_726_660_800.0

# file -> (query string, [(pool, action, outcome, number of alerts)])
CASES: dict[str, tuple[str, list[tuple[str | None, str | None, str, int]]]] = {
    "grafana/unified_9x_firing_valuestring.json": ("", [("gpu-a100", "scale_out", "scaled", 1)]),
    "grafana/unified_10x_firing_values.json": ("", [("gpu-h100", "scale_out", "scaled", 1)]),
    "grafana/unified_11x_group_firing.json": ("", [("gpu-a100", "scale_out", "scaled", 2),
                                                   ("gpu-h100", "scale_out", "scaled", 1)]),
    "grafana/unified_11x_resolved.json": ("", [("gpu-a100", "scale_out", "ignored_resolved", 1)]),
    "grafana/unified_test_notification.json": ("", [(None, None, "ignored_test", 1)]),
    "grafana/legacy_8x_alerting_routing_tags.json": ("", [("gpu-a100", "scale_out", "scaled", 1)]),
    "grafana/legacy_7x_alerting_tags_null.json": ("?pool=gpu-h100&action=scale_out",
                                                  [("gpu-h100", "scale_out", "scaled", 1)]),
    "grafana/legacy_4x_alerting_no_tags.json": ("?pool=gpu-a100&action=scale_out&step=2",
                                                [("gpu-a100", "scale_out", "scaled", 1)]),
    "grafana/legacy_8x_ok.json": ("", [("gpu-a100", "scale_out", "ignored_resolved", 1)]),
    "grafana/legacy_test_notification.json": ("?pool=gpu-a100&action=scale_out", [(None, None, "ignored_test", 1)]),
    "alertmanager/firing.json": ("", [("gpu-a100", "scale_out", "scaled", 1)]),
    "alertmanager/resolved.json": ("", [("gpu-a100", "scale_out", "ignored_resolved", 1)]),
    "alertmanager/group_3_alerts.json": ("", [("gpu-a100", "scale_out", "scaled", 2),
                                              ("gpu-h100", "scale_in", "scaled", 1)]),
    "alertmanager/truncated.json": ("", [("gpu-h100", "scale_out", "scaled", 2)]),
    "alertmanager/unknown_fields.json": ("", [("gpu-a100", "scale_in", "scaled", 1)]),
}
IGNORED_LEGACY_STATES = ["grafana/legacy_8x_no_data.json", "grafana/legacy_8x_paused.json",
                         "grafana/legacy_8x_pending.json"]


def _app(tmp_path: Path, grafana_hmac: dict[str, Any]) -> Flask:
    settings = build_settings({
        "server": {"auth": {"bearer_tokens": [TOKEN], "grafana_hmac": grafana_hmac}},
        "store": {"url": f"sqlite:///{tmp_path / 'corpus.db'}"},
        "rules": [{"match": {"alertname": "GPUQueueBacklog"}, "pool": "gpu-a100", "action": "scale_out"}],
        "pools": [
            {"name": "gpu-a100", "provider": "simulated", "min": 0, "max": 10, "simulated": {"initial_count": 2}},
            {"name": "gpu-h100", "provider": "simulated", "min": 1, "max": 8, "simulated": {"initial_count": 3}},
        ],
    }, env={})
    return create_app(settings, clock=FakeClock(NOW))


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return _app(tmp_path, {"secret": HMAC_SECRET, "header": "X-Grafana-Alerting-Signature",
                           "timestamp_header": "X-Grafana-Alerting-Timestamp", "max_skew": "5m"})


def _endpoint(name: str) -> str:
    return "/webhook/grafana" if name.startswith("grafana/") else "/webhook/alertmanager"


def _post(client: FlaskClient, name: str, query: str = "", headers: dict[str, str] | None = None) -> Any:
    body = (PAYLOADS / name).read_bytes()
    return client.post(_endpoint(name) + query, data=body, content_type="application/json",
                       headers=headers if headers is not None else {"Authorization": f"Bearer {TOKEN}"})


def test_every_corpus_file_has_a_case() -> None:
    on_disk = {str(p.relative_to(PAYLOADS)) for d in ("grafana", "alertmanager")
               for p in (PAYLOADS / d).rglob("*.json")}
    assert on_disk == set(CASES) | set(IGNORED_LEGACY_STATES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_file_gives_expected_decisions(app: Flask, name: str) -> None:
    query, expected = CASES[name]
    resp = _post(app.test_client(), name, query)
    assert resp.status_code == 200, resp.get_json()
    body = resp.get_json()
    assert body["received"] == len(json.loads((PAYLOADS / name).read_text()).get("alerts", [None]))
    if all(o == "ignored_test" for _, _, o, _ in expected):  # where a test notification is "routed" is moot
        assert [d["outcome"] for d in body["decisions"]] == ["ignored_test"]
        return
    got = sorted((d["pool"], d["action"], d["outcome"]) for d in body["decisions"])
    assert got == sorted((p, a, o) for p, a, o, _ in expected), body["decisions"]
    events = app.test_client().get("/api/v1/events", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    by_id = {e["id"]: e for e in events["events"]}
    for decision in body["decisions"]:
        event = by_id[decision["event_id"]]
        want = next(n for p, a, o, n in expected if (p, a, o) == (decision["pool"], decision["action"],
                                                                    decision["outcome"]))
        assert len(event["alerts"]) == want, event
        assert event["source"] == ("alertmanager" if name.startswith("alertmanager/") else
                                   "grafana_legacy" if "/legacy_" in name else "grafana")


def test_legacy_step_query_parameter_is_honoured(app: Flask) -> None:
    body = _post(app.test_client(), "grafana/legacy_4x_alerting_no_tags.json",
                 "?pool=gpu-a100&action=scale_out&step=2").get_json()
    assert [(d["from"], d["to"]) for d in body["decisions"]] == [(2, 4)]


@pytest.mark.parametrize("name", IGNORED_LEGACY_STATES)
def test_legacy_no_data_paused_pending_change_nothing(app: Flask, name: str) -> None:
    client = app.test_client()
    resp = _post(client, name)
    assert resp.status_code == 200, resp.get_json()
    assert all(d["outcome"] != "scaled" for d in resp.get_json()["decisions"])
    pool = client.get("/api/v1/pools/gpu-a100", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    assert pool["current"] == 2


def test_legacy_without_tags_or_query_is_unrouted(app: Flask) -> None:
    resp = _post(app.test_client(), "grafana/legacy_7x_alerting_tags_null.json")
    assert [d["outcome"] for d in resp.get_json()["decisions"]] == ["unrouted"]


def _signed(body: bytes, stamp: str, secret: str = HMAC_SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Grafana-Alerting-Signature": digest, "X-Grafana-Alerting-Timestamp": stamp}


@pytest.mark.parametrize("name", ["grafana/unified_11x_group_firing.json",
                                  "grafana/legacy_8x_alerting_routing_tags.json"])
def test_hmac_signed_grafana_request_is_accepted(app: Flask, name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    resp = _post(app.test_client(), name, headers=_signed(body, str(int(NOW))))
    assert resp.status_code == 200, resp.get_json()
    assert {d["outcome"] for d in resp.get_json()["decisions"]} == {"scaled"}


@pytest.mark.parametrize("headers, why", [
    pytest.param(lambda b: _signed(b, str(int(NOW)), "wrong-secret"), "invalid", id="wrong-secret"),
    pytest.param(lambda b: _signed(b, str(int(NOW) - 3600)), "window", id="stale-timestamp"),
    pytest.param(lambda b: {"X-Grafana-Alerting-Signature": _signed(b, "1")["X-Grafana-Alerting-Signature"]},
                 "missing", id="no-timestamp"),
    pytest.param(lambda b: _signed(b + b" ", str(int(NOW))), "invalid", id="body-changed-after-signing"),
])
def test_bad_hmac_is_refused_and_changes_nothing(app: Flask, headers: Any, why: str) -> None:
    name = "grafana/unified_9x_firing_valuestring.json"
    client = app.test_client()
    resp = _post(client, name, headers=headers((PAYLOADS / name).read_bytes()))
    assert resp.status_code == 401
    assert HMAC_SECRET not in resp.get_data(as_text=True)
    pool = client.get("/api/v1/pools/gpu-a100", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    assert pool["current"] == 2 and pool["last_event"] is None


def test_hmac_over_the_body_alone_when_no_timestamp_header_is_configured(tmp_path: Path) -> None:
    app = _app(tmp_path, {"secret": HMAC_SECRET, "timestamp_header": None})
    name = "grafana/unified_10x_firing_values.json"
    body = (PAYLOADS / name).read_bytes()
    good = {"X-Grafana-Alerting-Signature": hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()}
    assert _post(app.test_client(), name, headers=good).status_code == 200
    bad = {"X-Grafana-Alerting-Signature": hmac.new(b"other", body, hashlib.sha256).hexdigest()}
    assert _post(app.test_client(), name, headers=bad).status_code == 401

