"""Dedup drops the same notification delivered twice to the same destination, never the same alert sent to another
pool or another action (two receivers, two notification channels)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.support import AUTH, FakeClock, am_alert, am_payload, events, make_app

NO_COOLDOWN = {"scale_out": {"step": 1, "cooldown": 0},
               "scale_in": {"step": 1, "cooldown": 0, "delay_after_scale_out": 0}, "dedup_window": "10m"}


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    return make_app(f"sqlite:///{tmp_path}/state.db", FakeClock(), rules=[], defaults=NO_COOLDOWN).test_client()


def _am(client: FlaskClient, query: str) -> list[dict[str, Any]]:
    body = am_payload(am_alert(name="GPUQueueLong", fingerprint="fp-q"))  # no routing labels: the URL routes it
    resp = client.post(f"/webhook/alertmanager?{query}", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"]  # type: ignore[no-any-return]


def _legacy(client: FlaskClient, query: str) -> list[dict[str, Any]]:
    body = {"ruleId": 3, "ruleName": "GPUQueueLong", "state": "alerting", "evalMatches": [{"value": 90}]}
    resp = client.post(f"/webhook/grafana?{query}", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("send", [_am, _legacy], ids=["alertmanager", "grafana-legacy"])
def test_one_alert_to_two_pools_acts_on_each(client: FlaskClient, send: Any) -> None:
    [gpu] = send(client, "pool=gpu&action=scale_out")
    [spare] = send(client, "pool=spare&action=scale_out")
    assert (gpu["outcome"], gpu["to"]) == ("scaled", 3)
    assert (spare["outcome"], spare["to"]) == ("scaled", 1)
    [again] = send(client, "pool=spare&action=scale_out")  # the same destination twice: once
    assert again["outcome"] == "skipped_duplicate"


@pytest.mark.parametrize("send", [_am, _legacy], ids=["alertmanager", "grafana-legacy"])
def test_one_alert_to_two_actions_acts_on_each(client: FlaskClient, send: Any) -> None:
    [out] = send(client, "pool=gpu&action=scale_out")
    [inn] = send(client, "pool=gpu&action=scale_in")
    assert (out["outcome"], out["to"]) == ("scaled", 3)
    assert (inn["outcome"], inn["to"]) == ("scaled", 2)
    assert [e["outcome"] for e in events(client, pool="gpu")] == ["scaled", "scaled"]


def test_the_cooldown_short_cut_claims_for_its_own_pool_only(tmp_path: Path) -> None:
    clock = FakeClock()
    client = make_app(f"sqlite:///{tmp_path}/state.db", clock, rules=[]).test_client()
    first = am_payload(am_alert(name="GPUQueueLong", fingerprint="fp-0"))
    assert client.post("/webhook/alertmanager?pool=gpu&action=scale_out", json=first,
                       headers=AUTH).get_json()["decisions"][0]["outcome"] == "scaled"  # gpu now in cooldown
    [cooling] = _am(client, "pool=gpu&action=scale_out")  # settled by the stored state, its claim on the raw path
    assert cooling["outcome"] == "skipped_cooldown"
    [spare] = _am(client, "pool=spare&action=scale_out")
    assert (spare["outcome"], spare["to"]) == ("scaled", 1)
