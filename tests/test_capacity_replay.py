"""The replay with capacity: a simulated stockout window, a group's pools replayed together, unmet demand and
node-hours per pool in the figures, the shipped stockout scenario with and without its fallback."""
from __future__ import annotations

from typing import Any

from autoscaler.config import load_replay_config
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import load_trace
from tests.servers import ROOT

TRACE = ROOT / "bench" / "traces" / "diurnal_inference.csv"


def _figures(name: str) -> dict[str, Any]:
    _, settings = load_replay_config(str(ROOT / "bench" / "replay" / f"{name}.yaml"))
    return figures(simulate(settings, load_trace(str(TRACE))))


def test_the_stockout_scenario_with_and_without_the_fallback() -> None:
    grouped, alone = _figures("stockout"), _figures("stockout-alone")
    assert grouped["unmet_demand_gpu_minutes"] < alone["unmet_demand_gpu_minutes"]
    assert set(grouped["node_hours_by_pool"]) == {"a100-spot", "a100-ondemand"}
    assert grouped["node_hours_by_pool"]["a100-ondemand"] > 0
    assert set(alone["node_hours_by_pool"]) == {"a100-spot"}
    assert abs(sum(grouped["node_hours_by_pool"].values()) - grouped["node_hours"]) < 0.01
    stockout = ("2025-01-06T12:00:00.000Z", "2025-01-06T15:00:00.000Z")
    for fallback in grouped["fallbacks"]:
        assert stockout[0] <= fallback["no_capacity_at"] < stockout[1]
        assert fallback["fallback_pool"] == "a100-ondemand"
        assert 0 < fallback["seconds_to_fallback"] <= 120  # the simulated cloud's busy time plus one tick
    assert grouped["fallbacks"] and all("fallback_pool" not in f for f in alone["fallbacks"])
    assert grouped["outcomes"]["no_capacity"] >= 1
