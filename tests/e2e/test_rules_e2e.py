"""The shipped rules end to end: stand-ins serving dcgm-exporter's and kube-state-metrics' exposition text -> real
Prometheus evaluating deploy/prometheus's rules -> Alertmanager -> the service, which scales the right pool."""
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
from tests.support.fakes.kube_state_metrics import Pod
from tests.support.pipeline import prometheus_query, wait_for
from tests.support.pipeline_stack import AGENT_POOL, POOL, Stack

pytestmark = pytest.mark.slow
TOKEN = "rules-e2e-token"


@pytest.fixture
def demand_service(pipeline: Stack, tmp_path: Path) -> Iterator[tuple[AppServer, RecordingProvider]]:
    """The service with the stack's pool in demand mode, 2 GPUs a node, 2 nodes; Alertmanager posting to it."""
    pipeline.reset()
    settings = build_settings({
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "store": {"url": f"sqlite:///{tmp_path / 'rules-e2e.db'}"},
        "defaults": {"dedup_window": 0},
        "pools": [{"name": POOL, "provider": "simulated", "min": 1, "max": 8, "gpus_per_node": 2,
                   "scale_out": {"mode": "demand", "cooldown": 0},
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


def test_the_pool_comes_from_the_nodes_labels_not_the_gpu_series(pipeline: Stack) -> None:
    assert "autoscaler_pool" not in pipeline.dcgm.exposition()  # dcgm-exporter knows no pool
    expected = {(gpu.hostname, AGENT_POOL, POOL) for gpu in pipeline.dcgm.gpus}

    def pools() -> set[tuple[str, str, str]]:
        nodes = prometheus_query(pipeline.prometheus, "node:autoscaler_pool:info")
        return {(n["metric"]["node"], n["metric"]["cloud_pool"], n["metric"]["autoscaler_pool"]) for n in nodes}

    # A scrape that misses its 250 ms timeout on a loaded machine leaves the stand-ins' series stale until the next
    # one succeeds (an instant query then answers nothing): the labels must be there once a scrape has gone through.
    deadline, got = time.monotonic() + 10, pools()
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        got = pools()
    assert got == expected
    count = wait_for(lambda: prometheus_query(pipeline.prometheus,
                                              f'autoscaler_pool:gpus:count{{autoscaler_pool="{POOL}"}}'), 10,
                     "the pool's GPU count")
    assert float(count[0]["value"][1]) == len(pipeline.dcgm.gpus)


def _events(server: AppServer) -> list[dict[str, Any]]:
    resp = requests.get(f"{server.url}/api/v1/events", params={"pool": POOL},
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    resp.raise_for_status()
    return list(resp.json()["events"])


def test_pods_waiting_for_gpus_scale_their_pool_by_demand(pipeline: Stack,
                                                          demand_service: tuple[AppServer, RecordingProvider]) -> None:
    server, provider = demand_service
    node = pipeline.dcgm.gpus[0].hostname
    pipeline.ksm.set_pods([
        Pod("ml", "train-0", gpus=4, labels={"gpu-autoscaler/pool": POOL}),  # its label names the pool
        Pod("batch", "job-7", gpus=2),                                         # the default pool takes it
        Pod("ml", "infer-2", gpus=8, node=node),                              # Pending on a node: pulling its image
        Pod("ml", "serve-1", gpus=1, phase="Running", node=node),
    ])
    call = provider.wait_call(lambda c: c.target > c.current, timeout=15)
    assert call is not None, "no scale-out within 15 s of pods waiting for 6 GPUs"
    assert (call.current, call.target) == (2, 5)  # 2 + ceil(6 GPUs / 2 per node)
    events = wait_for(lambda: [e for e in _events(server) if e["outcome"] == "scaled"], 5, "the scale-out event")
    assert events[0]["action"] == "scale_out" and events[0]["source"] == "alertmanager"
    assert "ceil(6 GPUs / 2) = 5" in events[0]["reason"], events[0]["reason"]
    assert [a["alertname"] for a in events[0]["alerts"]] == ["GPUDemandPending"]
    pending = wait_for(lambda: prometheus_query(pipeline.prometheus, "cluster:autoscaler_gpus_pending:sum"), 10,
                       "the pending GPUs' sum (a scrape missed under load leaves it stale until the next)")
    assert float(pending[0]["value"][1]) == 6
