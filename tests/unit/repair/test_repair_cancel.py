"""A repair an operator cancelled stays cancelled while the alert that asked for it keeps firing (issue 46, item 1):
Alertmanager's repeats of the same alert (same fingerprint and ``startsAt``) answer ``skipped_cancelled`` and touch
nothing; once it resolves, a new firing starts a repair again. Through the app on a hand-moved clock, the real
kubernetes client against the fake API server and the webhook provider against a receiver (as
tests/unit/repair/test_repair.py).
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from flask.testing import FlaskClient

from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import am_alert, am_payload, events, post
from tests.support.repair_rig import cordoned, rig, scale_calls, seeded_kube

@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with seeded_kube() as fake:
        yield fake


FIRST = "2026-11-21T10:00:00Z"  # the alert's startsAt, the same on every repeat of one firing
SECOND = "2026-11-21T14:30:00Z"  # a new firing after the alert resolved


def notify(client: FlaskClient, *alerts: dict[str, Any]) -> list[dict[str, Any]]:
    resp = post(client, "/webhook/alertmanager", am_payload(*alerts))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"]  # type: ignore[no-any-return]


def xid(node: str, fingerprint: str = "fp-xid", starts_at: str = FIRST, status: str = "firing",
        **labels: str) -> dict[str, Any]:
    return am_alert("GPUNodeUnhealthy", status=status, fingerprint=fingerprint, starts_at=starts_at,
                    autoscaler_pool="gpu", autoscaler_action="repair", node=node, **labels)


def cancel(client: FlaskClient, node: str, reason: str = "false alarm: the exporter misread the XID") -> None:
    resp = post(client, "/api/v1/pools/gpu/repair", {"nodes": [node], "cancel": True, "reason": reason})
    assert resp.status_code == 200, resp.get_data(as_text=True)


def test_repeats_of_the_cancelled_alert_touch_nothing_until_it_resolves(tmp_path: Any, kube: FakeKube,
                                                                        receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    assert notify(r.client, xid("gpunp-2"))[0]["outcome"] == "repair_started"
    assert [b["to"] for b in scale_calls(receiver)] == [5]
    cancel(r.client, "gpunp-2")
    assert not cordoned(kube, "gpunp-2")
    for _ in range(3):  # Alertmanager's repeat_interval: the same alert, same fingerprint and startsAt
        r.clock.advance(4 * 3600)
        again = notify(r.client, xid("gpunp-2"))[0]
        assert again["outcome"] == "skipped_cancelled", again
        assert "cancelled" in again["reason"] and "gpunp-2" in again["reason"], again
    assert [b["to"] for b in scale_calls(receiver)] == [5]  # no second replacement (4 -> 5 -> 6 was the bug)
    assert not cordoned(kube, "gpunp-2") and r.repairs() == []
    assert r.tick() == [] and not cordoned(kube, "gpunp-2")
    cancelled = events(r.client, outcome="repair_cancelled")
    assert len(cancelled) == 1 and cancelled[0]["actor"] and "false alarm" in cancelled[0]["reason"]
    assert len(events(r.client, outcome="skipped_cancelled")) == 3
    resolved = notify(r.client, xid("gpunp-2", status="resolved"))
    assert resolved[0]["outcome"] == "ignored_resolved"
    back = notify(r.client, xid("gpunp-2", starts_at=SECOND))[0]  # it fires again: a new fault
    assert back["outcome"] == "repair_started", back
    assert cordoned(kube, "gpunp-2") and [b["to"] for b in scale_calls(receiver)] == [5, 6]


def test_a_new_firing_starts_a_repair_even_when_the_resolved_notification_was_not_sent(
        tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    notify(r.client, xid("gpunp-2"))
    cancel(r.client, "gpunp-2")
    assert notify(r.client, xid("gpunp-2"))[0]["outcome"] == "skipped_cancelled"
    back = notify(r.client, xid("gpunp-2", starts_at=SECOND))[0]  # send_resolved: false, then a new firing
    assert back["outcome"] == "repair_started", back


def test_every_alert_known_for_the_node_is_cancelled_and_other_nodes_still_start(
        tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    notify(r.client, xid("gpunp-2"))
    dup = notify(r.client, xid("gpunp-2", fingerprint="fp-nvlink"))[0]  # a second rule fires for the same node
    assert dup["outcome"] == "skipped_duplicate", dup
    cancel(r.client, "gpunp-2")
    both = notify(r.client, xid("gpunp-2"), xid("gpunp-2", fingerprint="fp-nvlink"))[0]
    assert both["outcome"] == "skipped_cancelled", both
    mixed = notify(r.client, xid("gpunp-2"), xid("gpunp-3", fingerprint="fp-other"))[0]
    assert mixed["outcome"] == "repair_started" and "gpunp-2 cancelled by an operator" in mixed["reason"], mixed
    details = next(e for e in events(r.client) if e["id"] == mixed["event_id"])["details"]
    assert details["nodes"] == ["gpunp-3"] and details["cancelled"] == ["gpunp-2"] and not cordoned(kube, "gpunp-2")


def test_a_manual_start_is_not_held_back_by_a_cancel(tmp_path: Any, kube: FakeKube,
                                                     receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    notify(r.client, xid("gpunp-2"))
    cancel(r.client, "gpunp-2")
    resp = post(r.client, "/api/v1/pools/gpu/repair", {"nodes": ["gpunp-2"], "reason": "it was real after all"})
    assert resp.get_json()["outcome"] == "repair_started", resp.get_json()


def test_the_openapi_answer_lists_the_outcome(tmp_path: Any, kube: FakeKube, receiver: WebhookReceiver) -> None:
    r = rig(tmp_path, kube, receiver.url)
    schemas = r.client.get("/openapi.json").get_json()["components"]["schemas"]
    outcomes = schemas["DecisionBody"]["properties"]["outcome"]
    listed = {v for part in outcomes.get("anyOf", [outcomes]) for v in _enum(schemas, part)}
    assert "skipped_cancelled" in listed, outcomes


def _enum(schemas: dict[str, Any], part: dict[str, Any]) -> list[str]:
    ref = part.get("$ref", "")
    return list((schemas[ref.rpartition("/")[2]] if ref else part).get("enum", []))
