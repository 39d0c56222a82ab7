"""Fixtures that build on each other: config -> settings -> app -> client."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config import Settings, build_settings
from tests.pipeline_stack import Stack, start_stack

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

BASE_CONFIG: dict[str, Any] = {
    "server": {"auth": {"bearer_tokens": [TOKEN]}},
    "defaults": {
        "scale_out": {"step": 1, "cooldown": "5m"},
        "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"},
        "dedup_window": "10m",
    },
    "rules": [
        {"match": {"alertname": "GPUUtilizationHigh"}, "pool": "gpu", "action": "scale_out"},
        {"match_re": {"alertname": "GPUUtilizationLow|GPUIdle"}, "pool": "gpu", "action": "scale_in"},
    ],
    "pools": [
        {"name": "gpu", "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2}},
        {"name": "spare", "provider": "simulated", "min": 0, "max": 3, "simulated": {"initial_count": 0}},
    ],
}


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def raw_config(tmp_path: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    return cfg


@pytest.fixture
def make_app(raw_config: dict[str, Any], clock: FakeClock) -> Callable[..., Flask]:
    def build(**changes: Any) -> Flask:
        cfg = copy.deepcopy(raw_config)
        cfg.update(changes)
        settings: Settings = build_settings(cfg, env={})
        return create_app(settings, clock=clock)

    return build


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def am_alert(name: str = "GPUUtilizationHigh", status: str = "firing", fingerprint: str = "fp1",
             starts_at: str = "2026-11-21T10:00:00Z", **labels: str) -> dict[str, Any]:
    """One Alertmanager alert."""
    return {"status": status, "labels": {"alertname": name, **labels}, "annotations": {"summary": "GPU busy"},
            "startsAt": starts_at, "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom/graph",
            "fingerprint": fingerprint}


def am_payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    """An Alertmanager version 4 notification."""
    return {"version": "4", "groupKey": "{}:{alertname=\"x\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "autoscaler", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts) or [am_alert()]}


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """dcgm stand-in -> Prometheus (250 ms) -> Alertmanager; tests route its webhook where they need it."""
    stack = start_stack(tmp_path_factory.mktemp("pipeline"))
    try:
        yield stack
    finally:
        stack.stop()
