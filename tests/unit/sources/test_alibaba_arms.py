"""Alibaba Cloud managed Prometheus (ARMS): the webhook body ``$alertmanager_content`` (docs/alibaba-prometheus.md)
renders an Alertmanager-shaped notification, which /webhook/alertmanager accepts as it is."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

from flask import Flask

from tests.support import BASE_CONFIG, events, post

SAMPLE = json.loads((Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" / "alibaba" /
                     "arms_alertmanager_content.json").read_text())


def test_the_rendered_body_scales_by_its_labels_and_value(make_app: Callable[..., Flask]) -> None:
    pools = copy.deepcopy(BASE_CONFIG["pools"])
    pools[0].update(simulated={"initial_count": 2}, scale_out={"mode": "proportional", "target_utilization": 45})
    client = make_app(pools=pools).test_client()
    resp = post(client, "/webhook/alertmanager", SAMPLE)
    assert resp.status_code == 200, resp.get_json()
    [decision] = resp.get_json()["decisions"]
    assert (decision["pool"], decision["action"], decision["outcome"]) == ("gpu", "scale_out", "scaled")
    assert decision["to"] == 5  # ceil(2 × 91.74 / 45): the value came through
    [event] = events(client, pool="gpu")
    assert event["source"] == "alertmanager"
    assert event["details"]["value"] == 91.73828125  # ARMS fills the `value` annotation
    assert event["alerts"] == [{"alertname": "GPUUtilizationHigh", "fingerprint": "4f1c2d9a7b3e8a60c5d14e2f9a8b7c61"}]


def test_without_routing_labels_the_webhook_url_routes_it(client: Any) -> None:
    body = copy.deepcopy(SAMPLE)
    for labels in (body["commonLabels"], body["alerts"][0]["labels"]):
        labels.pop("autoscaler_pool")
        labels.pop("autoscaler_action")
        labels["alertname"] = "ArmsGpuBusy"
    resp = post(client, "/webhook/alertmanager?pool=spare&action=scale_out", body)
    [decision] = resp.get_json()["decisions"]
    assert (decision["pool"], decision["action"], decision["outcome"]) == ("spare", "scale_out", "scaled")


def test_the_resolved_notification_never_scales(client: Any) -> None:
    body = copy.deepcopy(SAMPLE)
    body["status"] = body["alerts"][0]["status"] = "resolved"
    body["alerts"][0]["endsAt"] = "2026-11-21T07:40:15.404000000Z"
    [decision] = post(client, "/webhook/alertmanager", body).get_json()["decisions"]
    assert decision["outcome"] == "ignored_resolved"
