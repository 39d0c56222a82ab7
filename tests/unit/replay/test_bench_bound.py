"""bench/bound.py: an idealised reactive scaler on the unseen days, the yardstick for issue 37's goal."""
from __future__ import annotations

import random

from bench.bound import GRID, Rule, _init, bound, mutate, rank, replay, sample, score
from bench.tune import FAMILIES
from bench.traces.make_traces import generate


def test_with_no_boot_and_no_spare_the_idealised_scaler_is_perfect_foresight() -> None:
    day = generate("training_queue", 1, 22)
    cell = replay(day, Rule(), boot=0)
    assert cell["x"] == 1.0 and cell["saturated_pct"] == 0.0
    assert replay(day, Rule(), boot=5)["saturated_pct"] > 0  # the same rule with a boot is saturated


def test_a_step_of_demand_waits_the_boot_and_is_given_back_after_the_window() -> None:
    demand = [1.0] * 10 + [3.0] * 20 + [1.0] * 30
    # two nodes asked for at minute 10, ready at 15 (five saturated minutes); removed at 40, ten minutes after
    # the demand fell: 10 + 5 + 25 x 3 + 20 node-minutes against foresight's 100
    assert replay(demand, Rule(window=10), boot=5) == {"x": 1.1, "saturated_pct": 8.33, "changes": 1,
                                                       "node_hours": 1.8}
    # one spare node all day: never saturated by a rise of one node, a minute's node more everywhere
    rise = [1.0] * 10 + [2.0] * 50
    assert replay(rise, Rule(spare_night=1), boot=5)["saturated_pct"] == 0.0
    assert replay(rise, Rule(), boot=5)["saturated_pct"] == round(100 * 5 / 60, 2)
    # seen two minutes late, the rise is asked for two minutes later: seven saturated minutes
    assert replay(rise, Rule(), boot=5, lag=2)["saturated_pct"] == round(100 * 7 / 60, 2)


def test_scale_in_keeps_its_step_and_cooldown() -> None:
    demand = [6.0] * 10 + [1.0] * 50
    one_at_a_time = replay(demand, Rule(max_in=1, cooldown=10), boot=5)
    at_once = replay(demand, Rule(), boot=5)
    # at once: 6 nodes for 10 minutes, then 1; one at a time every 10 minutes: 5, 4, 3, 2, 1 from minutes 10, 20, ...
    assert at_once["node_hours"] == round((6 * 10 + 50) / 60, 1)
    assert one_at_a_time["node_hours"] == round((6 * 10 + 10 * (5 + 4 + 3 + 2) + 10 * 1) / 60, 1)
    assert one_at_a_time["changes"] == at_once["changes"] == 0  # scale-ins only: no change of direction


def test_the_search_reports_its_best_rules_as_the_unseen_days_judge_them() -> None:
    out = bound("training_queue", boot=5, candidates=3, rounds=1, top=3, neighbours=2, workers=1, smoke=True)
    assert out["days"] == 3 and out["boot_minutes"] == 5 and 4 <= out["tried"] <= 1 + 3 + 3 * 2
    verdicts = [entry["verdict"] for entry in out["best"]]
    assert [rank((Rule(), v)) for v in verdicts] == sorted(rank((Rule(), v)) for v in verdicts)
    assert out["any_point_pct"] >= verdicts[0]["meet_goal_pct"]  # each day's own choice does at least as well
    _init("training_queue", 5, 0, True)
    for entry in out["best"]:  # replayed afresh in this process, each rule gives the verdict reported
        assert score(Rule(**entry["rule"]))[0] == entry["verdict"]
    assert FAMILIES["training_queue"].budget == out["budget_pct"]


def test_draws_and_neighbours_stay_on_the_grid() -> None:
    rng = random.Random(3)
    for _ in range(50):
        rule = mutate(rng, sample(rng))
        assert all(getattr(rule, key) in values for key, values in GRID.items())
