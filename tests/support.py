"""Shared helpers of the hardening tests: a hand-moved clock, configs, payload builders."""
from __future__ import annotations

import copy
from typing import Any

from flask import Flask

from autoscaler.app import create_app
from autoscaler.config import build_settings
from providers import NodePoolProvider
from tests.conftest import FakeClock, am_alert, am_payload

__all__ = ["AUTH", "HMAC_SECRET", "TOKEN", "FakeClock", "am_alert", "am_payload", "config", "make_app"]

TOKEN = "hardening-token-7"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HMAC_SECRET = "hmac-secret-7"

BASE: dict[str, Any] = {
    "server": {"auth": {"bearer_tokens": [TOKEN], "basic": [{"username": "grafana", "password": "pw-7"}]}},
    "defaults": {"scale_out": {"step": 1, "cooldown": "5m"},
                 "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"},
                 "dedup_window": "10m"},
    "rules": [{"match": {"alertname": "GPUUtilizationHigh"}, "pool": "gpu", "action": "scale_out"}],
    "pools": [
        {"name": "gpu", "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2}},
        {"name": "spare", "provider": "simulated", "min": 0, "max": 3, "simulated": {"initial_count": 0}},
    ],
}




def config(db_url: str, **changes: Any) -> dict[str, Any]:
    """The base config with a store URL and top-level keys replaced."""
    cfg = copy.deepcopy(BASE)
    cfg["store"] = {"url": db_url}
    cfg.update(copy.deepcopy(changes))
    return cfg


def make_app(db_url: str, clock: FakeClock | None = None, providers: dict[str, NodePoolProvider] | None = None,
             **changes: Any) -> Flask:
    """An app on a fresh config; ``changes`` replace top-level config keys."""
    settings = build_settings(config(db_url, **changes), env={})
    return create_app(settings, clock=clock, providers=providers, startup_check=False)




