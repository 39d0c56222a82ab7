"""Each sender's payload parsed into typed alerts; unknown fields ignored; bad bodies refused clearly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.models import Source
from autoscaler.sources import PayloadError, alertmanager, grafana, value_from_value_string
from tests.support import am_alert, am_payload

SAMPLES = Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" / "core"


def load(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def test_alertmanager_v4_with_unknown_fields() -> None:
    body = am_payload(am_alert(fingerprint="abc", autoscaler_pool="gpu"))
    body["notification_reason"] = "new"
    body["alerts"][0]["somethingNew"] = {"x": 1}
    note = alertmanager.parse(body, {})
    assert note.source is Source.ALERTMANAGER
    (a,) = note.alerts
    assert (a.name, a.fingerprint, a.status, a.labels["autoscaler_pool"]) == ("GPUUtilizationHigh", "abc", "firing",
                                                                              "gpu")
    assert a.dedup_key == "alertmanager|abc|2026-11-21T10:00:00Z|firing"


def test_alertmanager_value_annotation_and_missing_fingerprint() -> None:
    alert = am_alert()
    del alert["fingerprint"]
    alert["annotations"]["value"] = "93.5"
    (a,) = alertmanager.parse(am_payload(alert), {}).alerts
    assert a.value == 93.5
    assert len(a.fingerprint) == 16  # derived from labels, stable
    assert a.fingerprint == alertmanager.parse(am_payload(alert), {}).alerts[0].fingerprint


def test_alertmanager_numbers_as_label_values() -> None:
    alert = am_alert()
    alert["labels"]["gpu"] = 3
    (a,) = alertmanager.parse(am_payload(alert), {}).alerts
    assert a.labels["gpu"] == "3"


@pytest.mark.parametrize("body,message", [
    pytest.param({"version": "4"}, "no `alerts` list", id="no-alerts"),
    pytest.param({"alerts": "x"}, "alerts", id="alerts-not-a-list"),
    pytest.param({"alerts": [{"labels": ["a"]}]}, "alerts[0].labels", id="labels-not-a-map"),
    pytest.param([1, 2], "no `alerts` list", id="array"),
])
def test_alertmanager_bad(body: object, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        alertmanager.parse(body, {})


def test_grafana_unified_values_and_test_notification() -> None:
    note = grafana.parse(load("grafana_unified_11.json"), {})
    assert note.source is Source.GRAFANA
    first, second = note.alerts
    assert first.value == 96.4 and first.status == "firing"
    assert first.dedup_key.startswith("grafana|")
    assert second.status == "resolved"
    (test,) = grafana.parse(load("grafana_test.json"), {}).alerts
    assert test.is_test


def test_grafana_unified_value_string_only() -> None:
    (a,) = grafana.parse(load("grafana_unified_9.json"), {}).alerts
    assert a.value == 88.25
    assert value_from_value_string("[ var='B' labels={gpu=0} value=1e2 ]") == 100.0
    assert value_from_value_string("no values here") is None


def test_grafana_value_ref() -> None:
    body = load("grafana_unified_11.json")
    (a, _) = grafana.parse(body, {}, value_ref="C").alerts
    assert a.value == 1.0


@pytest.mark.parametrize("state,status", [("alerting", "firing"), ("ok", "resolved"), ("no_data", "ignored"),
                                          ("paused", "ignored"), ("pending", "ignored")])
def test_grafana_legacy_states(state: str, status: str) -> None:
    body = load("grafana_legacy.json")
    body["state"] = state
    note = grafana.parse(body, {})
    (a,) = note.alerts
    assert note.source is Source.GRAFANA_LEGACY
    assert a.status == status
    assert a.dedup_key == f"grafana_legacy|7|{state}"


@pytest.mark.parametrize("state", [5, True, None, ["alerting"]])
def test_grafana_legacy_state_must_be_text(state: object) -> None:
    """A legacy body whose state is not a word is refused (422), not read as a state nobody sent."""
    body = load("grafana_legacy.json")
    body["state"] = state
    with pytest.raises(PayloadError, match="state"):
        grafana.parse(body, {})


@pytest.mark.parametrize("tags", [None, "missing", {"autoscaler_pool": "gpu"}])
def test_grafana_legacy_tags(tags: object) -> None:
    body = load("grafana_legacy.json")
    if tags == "missing":
        del body["tags"]
    else:
        body["tags"] = tags
    (a,) = grafana.parse(body, {}).alerts
    assert a.name == "GPU Usage"
    assert a.value == 97.0  # the highest evalMatch
    assert a.labels.get("autoscaler_pool") == (tags["autoscaler_pool"] if isinstance(tags, dict) else None)


def test_grafana_legacy_test_notification() -> None:
    body = load("grafana_legacy.json")
    body.update(ruleName="Test notification", ruleId=0, title="[Alerting] Test notification")
    (a,) = grafana.parse(body, {}).alerts
    assert a.is_test


def test_grafana_neither_shape() -> None:
    with pytest.raises(PayloadError, match="neither"):
        grafana.parse({"hello": "world"}, {})
