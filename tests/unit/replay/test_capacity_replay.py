"""The replay with capacity: a simulated stockout window, a group's pools replayed together, unmet demand and
node-hours per pool in the figures, the shipped stockout scenario with and without its fallback."""
from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config.load import load_replay_config
from autoscaler.replay import peers
from autoscaler.replay.report import figures, plot
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import load_trace
from tests.support.servers import ROOT

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


def test_the_stockout_day_ticks_the_reconciler_only_while_a_pool_is_short() -> None:
    """A tick for a shortfall runs while the spot pool holds fewer nodes than asked (the stockout), not every 30 s
    of the day: the group replays at a single pool's cost, with the figures docs/capacity.md gives."""
    _, settings = load_replay_config(str(ROOT / "bench" / "replay" / "stockout.yaml"))
    run = simulate(settings, load_trace(str(ROOT / "bench" / "traces" / "diurnal_inference.csv")))
    data = figures(run)
    assert (round(data["node_hours"], 1), data["saturated_minutes"], round(data["unmet_demand_gpu_minutes"])) == (
        183.3, 39, 158)
    assert {k: round(v, 1) for k, v in data["node_hours_by_pool"].items()} == {"a100-spot": 170.6,
                                                                               "a100-ondemand": 12.7}
    assert data["outcomes"]["no_capacity"] == 2
    assert 0 < run.ticks <= 20 < len(run.minutes) * 2  # a day has 2880 ticks of 30 s


def test_a_groups_replay_png_has_a_line_per_pool_decisions_on_them_stockouts_shaded_and_a_whole_title() -> None:
    from matplotlib import pyplot as plt

    _, settings = load_replay_config(str(ROOT / "bench" / "replay" / "stockout.yaml"))
    trace = load_trace(str(TRACE))
    run = simulate(settings, trace)
    others = peers(settings, trace)
    title = "a100: " + "a long title that used to run off both edges of the figure " * 4
    fig = plot(run, title, others, settings)
    try:
        top = fig.axes[0]
        labels = [line.get_label() for line in top.get_lines()]
        assert {"ready nodes of a100-spot", "ready nodes of a100-ondemand"} <= set(labels)
        assert {"cluster-autoscaler ready nodes (peer)",
                "cluster-autoscaler-overprovisioned ready nodes (peer)"} <= set(labels)
        shaded = [p for p in top.patches if "stockout" in str(p.get_label())]
        assert len(shaded) == 1  # 12:00-15:00 UTC, the spot pool's capacity window
        span = shaded[0].get_x(), shaded[0].get_x() + shaded[0].get_width()
        assert span == pytest.approx((12.0, 15.0))
        # each decision at its own pool's count: the on-demand pool's scale-outs at 1 and 2, not the group's 13+
        ondemand = sorted(d.to for _, d in run.decisions if d.pool == "a100-ondemand" and d.to is not None)
        marked = {round(float(y)) for c in top.collections for _, y in c.get_offsets()}
        assert ondemand and set(ondemand) <= marked and max(ondemand) <= 2
        fig.canvas.draw()
        box, width = top.title.get_window_extent(), fig.bbox.width
        assert 0 <= box.x0 and box.x1 <= width  # wrapped, not cut at the figure's edges
    finally:
        plt.close(fig)
