"""The real pipeline on its own: dcgm stand-in -> Prometheus -> Alertmanager -> a throwaway webhook receiver."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.fakes.webhook_receiver import Received, WebhookReceiver
from tests.support.pipeline_stack import POOL, Stack

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver(pipeline: Stack) -> Iterator[WebhookReceiver]:
    pipeline.reset()
    hook = WebhookReceiver()
    pipeline.alertmanager.route_to(hook.url + "/webhook/alertmanager", "pipeline-token")
    try:
        yield hook
    finally:
        pipeline.reset()
        hook.stop()


def _is(alertname: str, status: str) -> object:
    def match(r: Received) -> bool:
        return any(a["labels"].get("alertname") == alertname and a["status"] == status for a in r.body["alerts"])
    return match


def test_high_utilisation_reaches_the_webhook_then_resolves(pipeline: Stack, receiver: WebhookReceiver) -> None:
    print(f"\npipeline started in {pipeline.started_in:.1f}s")
    changed = time.monotonic()
    pipeline.dcgm.set_utilization(95)
    firing = receiver.wait(_is("GPUUtilizationHigh", "firing"), timeout=10)
    assert firing is not None, "no firing notification within 10 s"
    print(f"metric change -> firing notification: {firing.at - changed:.2f}s")
    assert firing.path == "/webhook/alertmanager"
    assert firing.headers["Authorization"] == "Bearer pipeline-token"
    assert firing.body["version"] == "4"
    alert = next(a for a in firing.body["alerts"] if a["labels"]["alertname"] == "GPUUtilizationHigh")
    assert alert["labels"]["autoscaler_pool"] == POOL
    assert alert["labels"]["autoscaler_action"] == "scale_out"
    assert float(alert["annotations"]["value"]) == pytest.approx(95)

    changed = time.monotonic()
    pipeline.dcgm.set_utilization(50)
    resolved = receiver.wait(_is("GPUUtilizationHigh", "resolved"), timeout=10)
    assert resolved is not None, "no resolved notification within 10 s"
    print(f"metric change -> resolved notification: {resolved.at - changed:.2f}s")


def test_low_utilisation_fires_the_scale_in_alert(pipeline: Stack, receiver: WebhookReceiver) -> None:
    pipeline.dcgm.set_utilization(5)
    firing = receiver.wait(_is("GPUUtilizationLow", "firing"), timeout=10)
    assert firing is not None, "no scale-in notification within 10 s"
    labels = firing.body["alerts"][0]["labels"]
    assert (labels["autoscaler_pool"], labels["autoscaler_action"]) == (POOL, "scale_in")
