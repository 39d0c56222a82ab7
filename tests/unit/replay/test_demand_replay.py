"""The surge the issue sets as the goal, replayed with the shipped demand config: 2 -> 10 nodes of demand with
8-minute boots asks for no node past the demand and is saturated for the boot time plus at most 3 minutes."""
from __future__ import annotations

from pathlib import Path

import yaml

from autoscaler.config.load import build_settings
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import Trace, parse_time

ROOT = Path(__file__).resolve().parents[3]
SURGE = Trace(parse_time("2025-01-06T00:00:00Z"), tuple([2.0] * 30 + [10.0] * 120 + [2.0] * 60))


def _surge(config: str) -> tuple[int, int]:
    raw = yaml.safe_load((ROOT / "bench" / "replay" / config).read_text())
    pool = raw["pools"][0]
    pool["simulated"] = {"initial_count": 2, "provision_seconds": 480, "busy_seconds": 60}
    if pool["scale_out"].get("mode") == "demand":
        pool["provision_time"] = "8m"
    run = simulate(build_settings(raw, env={}), SURGE)
    return max(m.requested for m in run.minutes), figures(run)["saturated_minutes"]


def test_surge_demand_mode_meets_the_goals_and_utilisation_steps_overshoot() -> None:
    peak, saturated = _surge("demand.yaml")
    assert peak == 10 and saturated <= 8 + 3, (peak, saturated)
    step_peak, step_saturated = _surge("step.yaml")
    assert step_peak > 10 and step_saturated > saturated  # what demand sizing fixes
