"""bench/shapes.py: the held-out kinds of issue 47 as seeded synthetic shapes, each the shape it is named for, and
judged by bench.real_weeks' harness."""
from __future__ import annotations

import json

from autoscaler.replay.outlook import day_levels, lone_peaks, outlook
from autoscaler.replay.trace import Trace
from bench.shapes import DAY, PEAK_DAY, image_growing, llm_daily, llm_weak, main, seeds, team_queue
from bench.traces.convert import EPOCH, nodes

WEEK = 7 * DAY
SEARCHED = 5 * DAY  # replay --tune's default holdout keeps days 6-7 back


def test_each_seed_draws_its_own_shape_and_the_same_one_again() -> None:
    assert llm_weak(1, 2) == llm_weak(1, 2) != llm_weak(2, 2)
    assert team_queue(1, 2) == team_queue(1, 2) != team_queue(2, 2)


def test_the_team_queue_moves_in_whole_8_gpu_jobs_mostly_in_working_hours() -> None:
    gpus = team_queue(1)
    assert len(gpus) == 19 * DAY and max(gpus) >= 16
    assert all(g % 8 == 0 for g in gpus)
    starts = [m for m in range(1, len(gpus)) if gpus[m] > gpus[m - 1]]
    weekday_days = [m for m in starts if (m // DAY) % 7 < 5 and 9 * 60 <= m % DAY < 19 * 60]
    assert len(weekday_days) > len(starts) / 2  # 10 of the week's 168 hours hold most arrivals


def test_the_lone_surge_is_in_the_searched_days_and_the_outlook_caps_it() -> None:
    demand = nodes(llm_weak(1))
    assert [d for d, _, _ in lone_peaks(demand, SEARCHED)] == [PEAK_DAY]
    ahead = outlook(Trace(EPOCH, tuple(demand[:WEEK])), SEARCHED)
    assert [d for d, _, _ in ahead.lone_peaks] == [PEAK_DAY]
    assert max(ahead.demand[PEAK_DAY * DAY:(PEAK_DAY + 1) * DAY]) < max(demand[PEAK_DAY * DAY:(PEAK_DAY + 1) * DAY])


def test_the_image_service_grows_half_again_over_its_days() -> None:
    levels = day_levels(nodes(image_growing(1)), 20 * DAY)
    growth = (sum(levels[-3:]) / 3) / (sum(levels[:3]) / 3)
    assert 1.3 < growth < 1.6
    assert min(levels) > 4.0  # about 5 nodes at the start, never idle


def test_the_daily_llm_service_has_a_clear_cycle_and_quieter_weekends() -> None:
    demand = nodes(llm_daily(1))
    hourly = [sum(demand[h * 60:(h + 1) * 60]) / 60 for h in range(5 * 24)]  # the weekdays, hour by hour
    day = [sum(hourly[d * 24 + h] for d in range(5)) / 5 for h in range(24)]
    assert max(day) / min(day) > 2.0  # +-40% around the mean: the busiest hour over twice the quietest
    weekdays, weekend = day_levels(demand, 7 * DAY)[:5], day_levels(demand, 7 * DAY)[5:]
    assert max(weekend) < min(weekdays)


def test_seeds_are_a_range_or_a_list() -> None:
    assert seeds("1-3") == [1, 2, 3] and seeds("4,7") == [4, 7]


def test_a_shape_is_judged_as_a_real_week_is(tmp_path, capsys) -> None:
    out = tmp_path / "shapes.json"
    assert main(["--smoke", "--only", "llm_weak", "--seeds", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["llm_weak-1"]
    judged = result["judged"]
    assert set(judged) == {"ours", "cluster_autoscaler", "cluster_autoscaler_overprovisioned", "ideal_reactive",
                           "ideal_reactive_calm"}
    assert judged["ideal_reactive_calm"]["changes_per_day"] <= 12  # the goal's limit holds for the calm yardstick
    assert result["judged_days"] == 2 and result["budget_pct"] == 1.0
    # the pause node is one more node than cluster-autoscaler keeps, every minute
    assert judged["cluster_autoscaler_overprovisioned"]["node_hours"] > judged["cluster_autoscaler"]["node_hours"]
    assert abs(judged["ours"]["x"] - judged["ours"]["node_hours"] / result["foresight_node_hours"]) < 0.002
    assert "work_cut_node_hours" in judged["ours"]
    assert "| LLM serving, weak daily cycle" in capsys.readouterr().out
