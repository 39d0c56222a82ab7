"""What a repair's events tell the operator at 3 a.m. (issue 46, item 1): the XID that started it (the alert's
``xid`` label, or the number in its summary), the pods the repair evicted, and no warning when a cloud that
removes a node at once has taken it before the service marks it. As tests/unit/repair/test_repair.py: the app on a
hand-moved clock, the real kubernetes client against the fake API server, the webhook provider against a receiver."""
from __future__ import annotations

import logging
from typing import Any, Iterator

import pytest

from tests.support.fakes.httpbase import Reply, Request
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import am_alert, am_payload, events, post
from tests.support.repair_rig import rig, seeded_kube


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with seeded_kube() as fake:
        yield fake


class RemovingCloud(WebhookReceiver):
    """A cloud whose removal of named nodes is done when it answers: the nodes leave the cluster at once."""

    def __init__(self, cluster: FakeKube) -> None:
        self.cluster = cluster
        super().__init__()

    def handle(self, request: Request) -> Reply:
        for name in (request.json() or {}).get("nodes") or []:
            self.cluster.nodes.pop(name, None)
        return super().handle(request)


@pytest.fixture
def cloud(kube: FakeKube) -> Iterator[RemovingCloud]:
    fake = RemovingCloud(kube)
    yield fake
    fake.stop()


def notify(client: Any, node: str, summary: str, **labels: str) -> dict[str, Any]:
    alert = am_alert("GPUNodeUnhealthy", fingerprint=f"fp-{node}", autoscaler_pool="gpu", autoscaler_action="repair",
                     node=node, **labels)
    alert["annotations"] = {"summary": summary}
    resp = post(client, "/webhook/alertmanager", am_payload(alert))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["decisions"][0]  # type: ignore[no-any-return]


def event(client: Any, event_id: int) -> dict[str, Any]:
    return next(e for e in events(client, limit="100") if e["id"] == event_id)


@pytest.mark.parametrize("labels, summary", [
    pytest.param({"xid": "79"}, "GPU fell off the bus", id="xid-label"),
    pytest.param({}, "GPU node gpunp-2 of pool gpu reported XID 79: replace it", id="xid-in-summary"),
])
def test_the_start_keeps_the_xid_in_its_reason_and_details(tmp_path: Any, kube: FakeKube,
                                                           cloud: RemovingCloud, labels: dict[str, str],
                                                           summary: str) -> None:
    r = rig(tmp_path, kube, cloud.url)
    started = notify(r.client, "gpunp-2", summary, **labels)
    assert started["outcome"] == "repair_started" and "XID 79" in started["reason"], started
    assert event(r.client, started["event_id"])["details"]["xid"] == {"gpunp-2": "79"}
    done = r.tick()
    assert [d["outcome"] for d in done] == ["repaired"] and done[0]["details"]["xid"] == "79", done


def test_repaired_names_the_pods_it_evicted_and_a_node_gone_at_once_is_no_warning(
        tmp_path: Any, kube: FakeKube, cloud: RemovingCloud, caplog: pytest.LogCaptureFixture) -> None:
    r = rig(tmp_path, kube, cloud.url)
    notify(r.client, "gpunp-1", "GPU node gpunp-1 of pool gpu reported XID 48: replace it")
    caplog.set_level(logging.INFO)
    caplog.clear()  # start-up's own warnings (the test config's short password) are not the repair's
    assert r.tick() == [] and ("ml", "infer-a") not in kube.pods  # the inference replica moved
    done = r.tick()
    assert [d["outcome"] for d in done] == ["repaired"], done
    assert done[0]["details"]["evicted"] == ["ml/infer-a"], done
    assert "gpunp-1" not in kube.nodes  # the cloud removed it before the service could mark it
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert warned == [], warned
