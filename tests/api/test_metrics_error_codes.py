"""/metrics labels a failed provider call with our own error vocabulary (issue 45, item 9): a cloud refusing with
twenty codes of its own adds one series, not twenty; its code stays in the event. No-capacity counts keep only the
codes the service knows (``providers/shortfalls.py``)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.metrics import Metrics
from providers.errors import Code
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.clients import make_webhook
from tests.support import AUTH, FakeClock, make_app, post


@pytest.fixture
def endpoint() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_twenty_cloud_codes_make_one_series_and_stay_in_the_events(tmp_path: Path, endpoint: FakeHookServer) -> None:
    statuses = [s for s in range(400, 432) if s not in (408, 409, 412, 423, 429)][:20]
    endpoint.then(*[Answer(status=s, body={"error": f"no {s}"}) for s in statuses])
    clock = FakeClock()
    client = make_app(f"sqlite:///{tmp_path}/s.db", clock, {"gpu": make_webhook(endpoint, clock.sleeps)}).test_client()
    for _ in statuses:
        answer = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_out", "step": 1, "force": True})
        assert answer.get_json()["outcome"] == "failed", answer.get_json()
    text = client.get("/metrics").get_data(as_text=True)
    assert _series(text, "gpu_autoscaler_provider_errors_total") == [
        f'gpu_autoscaler_provider_errors_total{{code="{Code.REFUSED.value}",provider="simulated"}} 20.0']
    events = client.get("/api/v1/events?pool=gpu&limit=100", headers=AUTH).get_json()["events"]
    assert sorted(int(e["details"]["cloud_code"]) for e in events if e["outcome"] == "failed") == statuses


def test_no_capacity_keeps_known_codes_and_folds_the_rest() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, pools=["gpu"])
    for i in range(50):
        metrics.no_capacity("gpu", f"QuotaExceed.Custom{i}")  # ACK's quota codes: any suffix
        metrics.no_capacity("gpu", f"REGION_{i}_QUOTA_EXCEEDED")  # GKE: any code naming a quota
    metrics.no_capacity("gpu", "ZONE_RESOURCE_POOL_EXHAUSTED")
    text = metrics.render().decode()
    assert sorted(_series(text, "gpu_autoscaler_no_capacity_total")) == [
        f'gpu_autoscaler_no_capacity_total{{code="{Code.NO_CAPACITY.value}",pool="gpu"}} 100.0',
        'gpu_autoscaler_no_capacity_total{code="ZONE_RESOURCE_POOL_EXHAUSTED",pool="gpu"} 1.0']
