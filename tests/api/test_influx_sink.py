"""The InfluxDB event sink against a real InfluxDB v2 write API (VictoriaMetrics) and against nothing at all."""
from __future__ import annotations

import json
import socket
import time
from datetime import datetime, timezone
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from autoscaler.config import InfluxConfig
from autoscaler.sinks import EventSink
from autoscaler.sinks.influx import InfluxSink
from tests.support.pipeline import Process, free_port, http_get, http_post, start_victoria_metrics

TOKEN = "influx-test-token-not-logged"
BASE = int(time.time()) // 60 * 60 - 600  # VictoriaMetrics drops samples outside its retention: stay recent


def _rfc3339(ts: int) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _event(n: int, **over: Any) -> dict[str, Any]:
    event = {"id": 100 + n, "time": _rfc3339(BASE + n), "pool": "gpu-a100", "source": "alertmanager",
             "action": "scale_out", "outcome": "scaled", "from": 2, "to": 3 + n,
             "reason": "scaled out by 1 node", "alerts": [{"alertname": "GPUUtilizationHigh", "fingerprint": "f"}]}
    event.update(over)
    return event


def _config(url: str, **over: Any) -> InfluxConfig:
    return InfluxConfig(url=url, token=SecretStr(TOKEN), org="ml", bucket="autoscaler", **over)


def _dropped(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("gpu_autoscaler_event_sink_dropped_total", {"sink": "influxdb"}) or 0.0


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    proc = start_victoria_metrics(tmp_path_factory.mktemp("vm"))
    try:
        yield proc
    finally:
        proc.stop()


def _export(vm: Process, match: str) -> list[dict[str, Any]]:
    assert http_post(vm.base_url + "/internal/force_flush") == 200
    status, body = http_get(f"{vm.base_url}/api/v1/export?match[]={match}&start={BASE - 60}")
    assert status == 200, body
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


@pytest.mark.slow
def test_events_arrive_as_points_with_tags_and_fields(victoria: Process) -> None:
    registry = CollectorRegistry()
    sink: EventSink = InfluxSink(_config(victoria.base_url, batch_size=2, flush_interval=0.2), registry=registry)
    assert isinstance(sink, InfluxSink)
    try:
        for n in range(3):
            sink.emit(_event(n))
        sink.emit(_event(3, pool=None, action=None, outcome="unrouted", **{"from": None, "to": None}))
        assert sink.flush(5.0)
    finally:
        sink.close()
    series = _export(victoria, "autoscaler_event_to")
    assert len(series) == 1
    assert series[0]["metric"] == {"__name__": "autoscaler_event_to", "pool": "gpu-a100", "action": "scale_out",
                                   "outcome": "scaled", "source": "alertmanager"}
    assert series[0]["values"] == [3, 4, 5]
    assert series[0]["timestamps"] == [(BASE + n) * 1000 for n in range(3)]
    everything = _export(victoria, '{__name__=~"autoscaler_event_.*"}')
    assert {s["metric"]["__name__"] for s in everything} == {
        "autoscaler_event_from", "autoscaler_event_to", "autoscaler_event_reason", "autoscaler_event_event_id"}
    ids = sorted(v for s in everything if s["metric"]["__name__"] == "autoscaler_event_event_id" for v in s["values"])
    assert ids == [100, 101, 102, 103]  # every event arrived, the unrouted one without pool/action tags too
    unrouted = next(s for s in everything if s["metric"].get("outcome") == "unrouted")
    assert "pool" not in unrouted["metric"] and "action" not in unrouted["metric"]
    assert _dropped(registry) == 0


def test_unreachable_influxdb_never_slows_emit_and_counts_drops(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    sink = InfluxSink(_config(f"http://127.0.0.1:{free_port()}", batch_size=10, flush_interval=0.05),
                      registry=registry, timeout=1.0)
    try:
        began = time.monotonic()
        for n in range(50):
            sink.emit(_event(n % 60))
        assert time.monotonic() - began < 0.1
        assert sink.flush(10.0)
    finally:
        sink.close()
    assert _dropped(registry) == 50
    assert "dropped" in caplog.text
    assert TOKEN not in caplog.text


def test_full_queue_drops_at_once_while_influxdb_hangs() -> None:
    registry = CollectorRegistry()
    with socket.socket() as hung:  # accepts connections (backlog) but never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        sink = InfluxSink(_config(url, batch_size=1, flush_interval=0.01), registry=registry, queue_size=5,
                          timeout=0.2)
        try:
            began = time.monotonic()
            for n in range(20):
                sink.emit(_event(n))
            assert time.monotonic() - began < 0.1
            assert _dropped(registry) >= 14  # one in the writer's hands at most, five queued
            assert sink.flush(10.0)
        finally:
            sink.close()
    assert _dropped(registry) == 20
