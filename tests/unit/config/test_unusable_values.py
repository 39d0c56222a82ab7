"""Non-finite alert values (NaN, Infinity, 1e999) are no usable value, and an unexpected error in one decision
leaves nothing behind: its dedup claims are released, the pool's lease too, and the other pools of the notification
are decided on their own."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.models import Action, CloudStatus, DirectionPolicy, Mode, Outcome, PoolSpec, PoolState, Signal, Source
from autoscaler.decide.policy import decide
from tests.support.fakes.scripted_cloud import ScriptedCloud
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, events

PROPORTIONAL = {"mode": "proportional", "target_utilization": 70, "cooldown": 0}


def _app(tmp_path: Path, clock: FakeClock, providers: dict[str, Any] | None = None) -> Flask:
    cfg = config(f"sqlite:///{tmp_path}/state.db")
    cfg["pools"] = [
        {"name": "gpu", "provider": "simulated", "min": 1, "max": 16, "simulated": {"initial_count": 4},
         "scale_out": PROPORTIONAL, "scale_in": {**PROPORTIONAL, "delay_after_scale_out": 0}},
        {"name": "spare", "provider": "simulated", "min": 0, "max": 8, "simulated": {"initial_count": 2},
         "scale_out": {"cooldown": 0}},
    ]
    return create_app(build_settings(cfg, env={}), clock=clock, providers=providers, startup_check=False)


def _raw(client: Any, path: str, text: str) -> Any:
    """Post ``text`` as it is: Python's json.dumps would refuse to write some of these numbers."""
    return client.post(path, data=text, headers={**AUTH, "Content-Type": "application/json"})


BODIES = {
    "grafana-values": ('/webhook/grafana', '{{"alerts": [{{"status": "firing", "labels": {{"alertname": "Hot", '
                                           '"autoscaler_pool": "gpu", "autoscaler_action": "scale_out"}}, '
                                           '"values": {{"A": {v}}}, "startsAt": "2026-01-01T00:00:00Z"}}]}}'),
    "grafana-legacy": ('/webhook/grafana', '{{"ruleId": 7, "ruleName": "Hot", "state": "alerting", '
                                           '"tags": {{"autoscaler_pool": "gpu", "autoscaler_action": "scale_out"}}, '
                                           '"evalMatches": [{{"metric": "util", "value": {v}}}]}}'),
    "manual": ('/api/v1/pools/gpu/scale', '{{"action": "scale_out", "value": {v}}}'),
    # Prometheus renders {{ $value }} of a division by zero as NaN or +Inf
    "alertmanager-annotation": ('/webhook/alertmanager', '{{"alerts": [{{"status": "firing", "labels": {{"alertname": '
                                                         '"Hot", "autoscaler_pool": "gpu", "autoscaler_action": '
                                                         '"scale_out"}}, "annotations": {{"value": "{v}"}}}}]}}'),
}


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("kind", list(BODIES))
def test_non_finite_value_is_no_usable_value(tmp_path: Path, kind: str, value: str) -> None:
    client = _app(tmp_path, FakeClock()).test_client()
    path, template = BODIES[kind]
    resp = _raw(client, path, template.format(v=value))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    body = resp.get_json()
    decision = body if kind == "manual" else body["decisions"][0]
    assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 4, 5)  # the fixed step
    assert "not a finite number: fixed step instead" in decision["reason"]
    [event] = [e for e in events(client, pool="gpu") if e["outcome"] == "scaled"]
    assert event["details"].get("value") is None and event["details"]["fallback"] == "step"
    json.loads(client.get("/api/v1/events", headers=AUTH).get_data(as_text=True),
               parse_constant=lambda c: pytest.fail(f"{c} in an answer"))  # strict JSON out


def test_a_finite_value_beside_a_non_finite_one_is_used(tmp_path: Path) -> None:
    client = _app(tmp_path, FakeClock()).test_client()
    body = ('{"alerts": [{"status": "firing", "labels": {"alertname": "Hot", "autoscaler_pool": "gpu", '
            '"autoscaler_action": "scale_out"}, "values": {"A": NaN, "B": 140.0}, "startsAt": "x"}, '
            '{"status": "firing", "labels": {"alertname": "Hot2", "autoscaler_pool": "gpu", '
            '"autoscaler_action": "scale_out"}, "values": {"A": Infinity}, "startsAt": "y"}]}')
    [decision] = _raw(client, "/webhook/grafana", body).get_json()["decisions"]
    assert (decision["outcome"], decision["to"]) == ("scaled", 8), decision["reason"]  # ceil(4 x 140 / 70)


def test_huge_finite_value_is_clamped_not_a_crash() -> None:
    spec = PoolSpec(name="gpu", provider="simulated", min=1, max=2000, dry_run=False, dedup_window=60,
                    scale_out=DirectionPolicy(cooldown=0, mode=Mode.PROPORTIONAL), scale_in=DirectionPolicy())
    signal = Signal(pool="gpu", action=Action.SCALE_OUT, source=Source.MANUAL, value=1.5e308)
    plan = decide(signal, spec, PoolState(name="gpu"), CloudStatus(current=1000), 0.0)  # 1000 x 1.5e308 / 70: inf
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 2000), plan.reason


class StatusBug(ScriptedCloud):
    """A cloud client whose status read raises something no provider should (an SDK surprise, a bug)."""

    def __init__(self, count: int = 2) -> None:
        super().__init__(count)
        self.broken = True

    def status(self, tracked: Any, now: float) -> Any:
        if self.broken:
            raise KeyError("properties")
        return super().status(tracked, now)


def test_unexpected_error_releases_the_claim_and_spares_the_other_pool(tmp_path: Path) -> None:
    clock = FakeClock()
    cloud = StatusBug(count=2)
    app = _app(tmp_path, clock, providers={"spare": cloud})
    client = app.test_client()
    body = am_payload(am_alert(fingerprint="fp-gpu", autoscaler_pool="gpu", autoscaler_action="scale_out"),
                      am_alert(name="Other", fingerprint="fp-spare", autoscaler_pool="spare",
                               autoscaler_action="scale_out"))
    first = client.post("/webhook/alertmanager", json=body, headers=AUTH)
    assert first.status_code == 503 and int(first.headers["Retry-After"]) >= 1  # the sender must try again
    by_pool = {d["pool"]: d for d in first.get_json()["decisions"]}
    assert by_pool["gpu"]["outcome"] == "scaled"  # decided on its own, not undone by the other's error
    assert by_pool["spare"]["outcome"] == "failed"
    assert "unexpected error (KeyError)" in by_pool["spare"]["reason"]
    with app.app_context():
        store = app.extensions["autoscaler"].store
        assert store.pool("spare").failures == 0  # not the cloud's failure: no backoff
    assert [e["outcome"] for e in events(client, pool="spare")] == ["failed"]

    cloud.broken = False
    again = client.post("/webhook/alertmanager", json=body, headers=AUTH)
    assert again.status_code == 200
    by_pool = {d["pool"]: d for d in again.get_json()["decisions"]}
    assert by_pool["gpu"]["outcome"] == "skipped_duplicate"  # it acted the first time
    assert (by_pool["spare"]["outcome"], by_pool["spare"]["to"]) == ("scaled", 3)  # not skipped_duplicate
    assert cloud.calls == [(2, 3)]


def test_unexpected_error_releases_the_lease(tmp_path: Path) -> None:
    clock = FakeClock()
    cloud = StatusBug(count=2)
    app = _app(tmp_path, clock, providers={"spare": cloud})
    client = app.test_client()
    resp = client.post("/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=AUTH)
    assert resp.status_code == 200 and resp.get_json()["outcome"] == "failed"
    cloud.broken = False
    from sqlalchemy import create_engine, text

    with create_engine(f"sqlite:///{tmp_path}/state.db").connect() as conn:
        assert conn.execute(text("SELECT lease_owner FROM pools WHERE name='spare'")).scalar() is None
    resp = client.post("/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=AUTH)
    assert resp.get_json()["outcome"] == "scaled"


def test_a_zero_value_is_a_value(tmp_path: Path) -> None:
    """Grafana's valueString of 0 (an idle pool) is a value, not a missing one (it used to fall through to none)."""
    client = _app(tmp_path, FakeClock()).test_client()
    body = {"alerts": [{"status": "firing", "labels": {"alertname": "Idle", "autoscaler_pool": "gpu",
                                                       "autoscaler_action": "scale_in"},
                        "valueString": "[ var='A' labels={} value=0 ]", "startsAt": "2026-01-01T00:00:00Z"}]}
    [decision] = client.post("/webhook/grafana", json=body, headers=AUTH).get_json()["decisions"]
    assert (decision["outcome"], decision["to"]) == ("scaled", 1), decision["reason"]  # ceil(4 x 0 / 70), min 1
