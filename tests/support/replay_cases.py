"""Replay and tuner cases shared by the replay and tuner tests: a start time, a small config, a trace writer and
the tuner's base file (test modules never import each other; tests/project/test_layers.py)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from autoscaler.replay.trace import parse_time

T0 = parse_time("2025-01-06T00:00:00Z")


def config(pool: dict[str, Any] | None = None, rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A replay config: one simulated pool, step 1 both ways, rules on utilisation."""
    return {
        "server": {"auth": {"disabled": True}},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 10,
                   "scale_out": {"step": 1, "cooldown": "3m"},
                   "scale_in": {"step": 1, "cooldown": "10m", "delay_after_scale_out": "10m"},
                   "simulated": {"initial_count": 1, "provision_seconds": 300}, **(pool or {})}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "5m",
                   "rules": rules or [{"alert": "GPUHigh", "above": 80, "for": "2m", "pool": "gpu",
                                       "action": "scale_out"},
                                      {"alert": "GPULow", "below": 30, "for": "10m", "pool": "gpu",
                                       "action": "scale_in"}]},
    }


def write_trace(path: Path, demand: list[float]) -> Path:
    lines = ["timestamp,demand"] + [
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(T0 + 60 * i))},{d}" for i, d in enumerate(demand)]
    path.write_text("\n".join(lines) + "\n")
    return path


BASE = """\
# the base file's own comment, kept in tuned.yaml
server:
  auth: {bearer_tokens: ["${TUNE_TOKEN:-dev-token}"]}
defaults:
  dedup_window: 1m
pools:
  - name: gpu
    provider: simulated
    min: 1
    max: 32
    scale_out: {mode: proportional, target_utilization: 40, max_step: 4, cooldown: 3m, value_ref: B}
    scale_in: {mode: step, step: 1, cooldown: 10m, delay_after_scale_out: 10m}
    simulated: {initial_count: 3, provision_seconds: 300}
replay:
  evaluation_interval: 30s
  group_wait: 30s
  group_interval: 1m
  repeat_interval: 5m
  rules:
    - {alert: GPUUtilizationHigh, above: 80, for: 1m, pool: gpu, action: scale_out, labels: {team: ml}}
    - {alert: GPUUtilizationLow, below: 40, for: 5m, pool: gpu, action: scale_in}
"""
