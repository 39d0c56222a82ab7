"""From a GPU metric to a node-pool change: dcgm stand-in -> Prometheus -> Alertmanager -> the app -> provider."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from providers import build
from tests.support.app_server import AppServer, RecordingProvider
from tests.support.pipeline import wait_for
from tests.support.pipeline_stack import POOL, Stack

pytestmark = pytest.mark.slow
TOKEN = "e2e-token"


@pytest.fixture
def service(pipeline: Stack, tmp_path: Path) -> Iterator[tuple[AppServer, RecordingProvider]]:
    pipeline.reset()
    settings = build_settings({
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "store": {"url": f"sqlite:///{tmp_path / 'e2e.db'}"},
        "defaults": {"scale_out": {"step": 1, "cooldown": 0},
                     "scale_in": {"step": 1, "cooldown": 0, "delay_after_scale_out": 0}, "dedup_window": 0},
        "pools": [{"name": POOL, "provider": "simulated", "min": 1, "max": 6,
                   "simulated": {"initial_count": 2, "provision_seconds": 0}}],
    }, env={})
    spec = settings.pools[POOL]
    provider = RecordingProvider(build(spec.provider, POOL, spec.provider_settings))
    server = AppServer(create_app(settings, providers={POOL: provider}))
    pipeline.alertmanager.route_to(server.url + "/webhook/alertmanager", TOKEN)
    try:
        yield server, provider
    finally:
        pipeline.reset()
        server.stop()


def _events(server: AppServer) -> list[dict[str, Any]]:
    resp = requests.get(f"{server.url}/api/v1/events", params={"pool": POOL},
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    resp.raise_for_status()
    return list(reversed(resp.json()["events"]))  # oldest first


def _pool(server: AppServer) -> dict[str, Any]:
    resp = requests.get(f"{server.url}/api/v1/pools/{POOL}", headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=5)
    resp.raise_for_status()
    return dict(resp.json())


def test_gpu_utilisation_scales_the_pool_out_and_back_in(
        pipeline: Stack, service: tuple[AppServer, RecordingProvider]) -> None:
    server, provider = service
    assert _pool(server)["current"] == 2

    changed = time.monotonic()
    pipeline.dcgm.set_utilization(95)
    out = provider.wait_call(lambda c: c.target > c.current, timeout=10)
    assert out is not None, "no scale-out call within 10 s of utilisation 95"
    assert (out.current, out.target) == (2, 3)
    print(f"\nmetric change -> provider scale-out call: {out.at - changed:.2f}s")

    changed = time.monotonic()
    pipeline.dcgm.set_utilization(5)
    back = provider.wait_call(lambda c: c.target < c.current, timeout=10)
    assert back is not None, "no scale-in call within 10 s of utilisation 5"
    assert (back.current, back.target) == (3, 2)
    print(f"metric change -> provider scale-in call: {back.at - changed:.2f}s")

    pipeline.dcgm.set_utilization(50)  # resolves GPUUtilizationLow as well
    events = wait_for(lambda: (lambda evs: evs if sum(e["outcome"] == "ignored_resolved" for e in evs) >= 2
                               else None)(_events(server)), 10.0, "both alerts' resolved events", interval=0.1)
    summary = [(e["action"], e["outcome"], e["from"], e["to"]) for e in events]
    assert ("scale_out", "scaled", 2, 3) in summary
    assert ("scale_in", "scaled", 3, 2) in summary
    resolved = [e for e in events if e["outcome"] == "ignored_resolved"]
    assert {a["alertname"] for e in resolved for a in e["alerts"]} == {"GPUUtilizationHigh", "GPUUtilizationLow"}
    assert all(e["source"] == "alertmanager" for e in events)
    assert len(provider.calls) == 2, provider.calls
    assert _pool(server)["current"] == 2
