"""POST /webhook/azure-monitor: Azure Monitor's common alert schema (managed Prometheus, metric and log alerts)
through the real endpoint: routing by labels, rules and query, resolved, dedup of Azure's retries, bad input."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
from flask import Flask

from autoscaler.models import AlertStatus
from autoscaler.sources import PayloadError, azure_monitor
from tests.support import AUTH, events, post

PAYLOADS = Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" / "azure_monitor"
HOOK = "/webhook/azure-monitor"


def payload(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / f"{name}.json").read_text())


def only_decision(resp: Any) -> dict[str, Any]:
    assert resp.status_code == 200, resp.get_json()
    body = resp.get_json()
    assert body["received"] == 1 and len(body["decisions"]) == 1
    return body["decisions"][0]


def test_managed_prometheus_alert_scales_by_its_labels(app: Flask) -> None:
    client = app.test_client()
    decision = only_decision(post(client, HOOK, payload("prometheus_fired")))
    assert (decision["pool"], decision["action"], decision["outcome"]) == ("gpu", "scale_out", "scaled")
    assert (decision["from"], decision["to"]) == (2, 3)
    [event] = events(client, pool="gpu")
    assert event["source"] == "azure_monitor"
    assert event["alerts"] == [{"alertname": "GPUUtilizationHigh",
                                "fingerprint": "6c4a9e0f-1d2b-4c3a-9e8f-0a1b2c3d4e5f"}]


def test_azure_retry_of_the_same_firing_is_a_duplicate_and_resolved_never_scales(app: Flask) -> None:
    client = app.test_client()
    assert only_decision(post(client, HOOK, payload("prometheus_fired")))["outcome"] == "scaled"
    assert only_decision(post(client, HOOK, payload("prometheus_fired")))["outcome"] == "skipped_duplicate"
    resolved = only_decision(post(client, HOOK, payload("prometheus_resolved")))
    assert resolved["outcome"] == "ignored_resolved" and resolved["pool"] == "gpu"
    assert [e["outcome"] for e in events(client, pool="gpu")] == ["ignored_resolved", "skipped_duplicate", "scaled"]


def test_metric_alert_routes_by_custom_properties_and_reads_metric_value(make_app: Callable[..., Flask]) -> None:
    spare = {"name": "spare", "provider": "simulated", "min": 0, "max": 8, "simulated": {"initial_count": 2},
             "scale_out": {"mode": "proportional", "target_utilization": 1, "max_step": 4}}
    app = make_app(pools=[{"name": "gpu", "provider": "simulated", "min": 1, "max": 6}, spare])
    decision = only_decision(post(app.test_client(), HOOK, payload("metric_fired")))
    # proportional: ceil(2 × 3 / 1) = 6 from the criterion's metricValue 3
    assert (decision["pool"], decision["action"], decision["to"]) == ("spare", "scale_out", 6)
    [event] = events(app.test_client(), pool="spare")
    assert event["details"]["value"] == 3


def test_log_alert_with_nothing_to_route_by_is_unrouted_with_a_reason(client: Any) -> None:
    decision = only_decision(post(client, HOOK, payload("log_alert_fired")))
    assert decision["outcome"] == "unrouted" and decision["pool"] is None
    assert "gpu-driver-xid-errors" in decision["reason"] and "no pool and action" in decision["reason"]


def test_log_alert_routed_by_the_url_query(client: Any) -> None:
    decision = only_decision(post(client, f"{HOOK}?pool=spare&action=scale_out", payload("log_alert_fired")))
    assert (decision["pool"], decision["action"], decision["outcome"]) == ("spare", "scale_out", "scaled")


def test_labels_beat_the_query_and_a_rule_routes_by_alert_name(client: Any) -> None:
    labelled = only_decision(post(client, f"{HOOK}?pool=spare&action=scale_in", payload("prometheus_fired")))
    assert (labelled["pool"], labelled["action"]) == ("gpu", "scale_out")
    by_rule = payload("prometheus_fired")
    by_rule["data"]["essentials"]["alertId"] += "-2"
    by_rule["data"]["alertContext"]["labels"] = {"alertname": "GPUIdle", "cluster": "aks-gpu-prod"}
    ruled = only_decision(post(client, f"{HOOK}?pool=spare&action=scale_out", by_rule))
    assert (ruled["pool"], ruled["action"]) == ("gpu", "scale_in")  # the base config's rule for GPUIdle


def _with(path: str, value: Any) -> dict[str, Any]:
    body = payload("prometheus_fired")
    node: Any = body
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    if value is _DROP:
        del node[last]
    else:
        node[last] = value
    return body


_DROP = object()


@pytest.mark.parametrize("body, status, words", [
    pytest.param([1, 2], 400, "JSON object", id="not-an-object"),
    pytest.param({"schemaId": "AzureMonitorMetricAlert", "data": {}}, 422, "enable the common alert schema",
                 id="legacy-metric-schema"),
    pytest.param({"data": {"essentials": {}}}, 422, "no schemaId", id="no-schema-id"),
    pytest.param(_with("data.essentials", _DROP), 422, "essentials", id="no-essentials"),
    pytest.param(_with("data.essentials.monitorCondition", "Maybe"), 422, "Fired or Resolved", id="bad-condition"),
    pytest.param(_with("data.essentials.alertId", ""), 422, "alertId", id="empty-alert-id"),
    pytest.param(_with("data.alertContext.labels", ["x"]), 422, "labels", id="labels-not-a-map"),
    pytest.param(_with("data.alertContext.condition", {"allOf": [{"metricValue": "hot"}]}), 422, "metricValue",
                 id="metric-value-not-a-number"),
])
def test_bad_input_is_a_json_4xx_never_5xx(client: Any, body: Any, status: int, words: str) -> None:
    resp = post(client, HOOK, body)
    assert resp.status_code == status and words in resp.get_json()["error"]
    assert events(client) == []


def test_not_json_and_wrong_credentials(client: Any) -> None:
    assert client.post(HOOK, data="{nope", headers={**AUTH, "Content-Type": "application/json"}).status_code == 400
    resp = client.post(HOOK, json=payload("prometheus_fired"), headers={"Authorization": "Bearer wrong"})
    assert resp.status_code == 401


def test_openapi_publishes_the_route(client: Any) -> None:
    spec = client.get("/openapi.json").get_json()
    assert spec["paths"][HOOK]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AzureMonitorPayload"}
    assert "AzureMonitorPayload" in spec["components"]["schemas"]


# The parser, field by field.

def _alert(body: dict[str, Any]) -> Any:
    [alert] = azure_monitor.parse(body, {}).alerts
    return alert


def test_alertname_comes_from_the_rule_label_else_the_alert_rule() -> None:
    body = payload("prometheus_fired")
    assert _alert(body).name == "GPUUtilizationHigh"  # alertRule: the labels carry no alertname
    body["data"]["alertContext"]["labels"]["alertname"] = "GPUHot"
    assert _alert(body).name == "GPUHot"


def test_metric_dimensions_are_labels_and_properties_never_override_them() -> None:
    body = payload("metric_fired")
    body["data"]["customProperties"]["phase"] = "Running"
    alert = _alert(body)
    assert alert.labels["phase"] == "Pending" and alert.labels["Kubernetes namespace"] == "ml"
    assert alert.labels["autoscaler_pool"] == "spare" and alert.name == "spare-pool-pending-pods"
    assert alert.values == {"kube_pod_status_phase": 3.0} and alert.value == 3.0


def test_several_criteria_give_the_first_value_and_each_by_metric_name() -> None:
    body = payload("metric_fired")
    first = body["data"]["alertContext"]["condition"]["allOf"][0]
    body["data"]["alertContext"]["condition"]["allOf"].append({**first, "metricName": "gpu_util", "metricValue": 97.5})
    alert = _alert(body)
    assert alert.value == 3.0 and alert.value_for("gpu_util") == 97.5


@pytest.mark.parametrize("text, value", [("93.5", 93.5), ("12.7m", 0.0127), ("1.5k", 1500.0), ("2e3", 2000.0),
                                         ("-4", -4.0), ("n/a", None), ("3x", None), ("", None)])
def test_expression_value_as_azure_renders_it(text: str, value: float | None) -> None:
    body = payload("prometheus_fired")
    body["data"]["alertContext"]["expressionValue"] = text
    got = _alert(body).value
    assert got == pytest.approx(value) if value is not None else got is None


def test_dedup_key_is_alert_id_and_condition() -> None:
    fired, resolved = _alert(payload("prometheus_fired")), _alert(payload("prometheus_resolved"))
    assert fired.status is AlertStatus.FIRING and resolved.status is AlertStatus.RESOLVED
    alert_id = payload("prometheus_fired")["data"]["essentials"]["alertId"]
    assert fired.dedup_key == f"azure_monitor|{alert_id}|fired"
    assert resolved.dedup_key == f"azure_monitor|{alert_id}|resolved"
    assert fired.starts_at == "2026-11-21T10:02:11.5321842Z"


def test_condition_is_read_case_insensitively_and_unknown_fields_are_ignored() -> None:
    body = copy.deepcopy(payload("prometheus_fired"))
    body["data"]["essentials"]["monitorCondition"] = "fired"
    body["data"]["somethingNew"] = {"x": 1}
    body["data"]["essentials"]["newField"] = [1]
    assert _alert(body).status is AlertStatus.FIRING
    with pytest.raises(PayloadError):
        azure_monitor.parse({**body, "schemaId": "Microsoft.Insights/activityLogs"}, {})
