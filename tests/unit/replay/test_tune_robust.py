"""The tuner's objective (interrupted work, direction changes a day) and its robust choice: stressed copies of the
history, steadier variants, and the pick among near-equal finalists."""
from __future__ import annotations

from typing import Any

import pytest
import yaml

from autoscaler.config.load import build_settings
from autoscaler.replay.robust import (JUDGE_WAVE, Judged, Rule, burstiest_days, busier, finalists, judge, noisier,
                                      leaves_a_node_waiting, pick, settle, sharper, steadier, stressed_copies)
from autoscaler.replay.space import ABOVE, BELOW, Space, fine_thresholds
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.robust import PICK_NEAR
from autoscaler.replay.tune import Budget, Score, choose, make_pool
from tests.support.replay_cases import BASE

T0 = parse_time("2025-01-06T00:00:00Z")


def score(hours: float, saturated: int = 0, changes: int = 0, worst: int | None = None,
          day_changes: tuple[int, ...] = (), interrupted: float = 0.0) -> Score:
    return Score(hours, saturated, changes, 1440, "", saturated if worst is None else worst, (), 0.0, interrupted,
                 day_changes)


def test_interrupted_work_counts_in_the_cost_and_the_choice() -> None:
    # 100 node-hours that cut 1200 node-minutes of work (20 node-hours to run again) cost more than 110 that cut none
    cutting, gentle = score(100, interrupted=1200.0), score(110)
    assert cutting.cost == pytest.approx(120.0) and gentle.cost == 110.0
    assert choose([({"i": 0}, cutting), ({"i": 1}, gentle)], Budget(5))[0] == {"i": 1}


def test_worst_changes_is_the_busiest_day() -> None:
    assert score(1, changes=9, day_changes=(2, 6, 1)).worst_changes == 6
    assert score(1, changes=4).worst_changes == 4  # no whole day: the span's count


@pytest.mark.parametrize("stress,demand,want", [
    pytest.param(busier, [2.0, 4.0], [2.3, 4.6], id="busier-scales-every-minute-by-1.15"),
    pytest.param(sharper, [1, 1, 1, 1, 1, 1, 1, 8, 8, 1], [1, 1, 8, 8, 8, 8, 8, 8, 8, 1],
                 id="sharper-brings-a-surge-5-minutes-sooner-at-once"),
    pytest.param(noisier, [5.0] * 20, [5.0] * 20, id="noisier-leaves-a-flat-line"),
])
def test_stresses(stress: Any, demand: list[float], want: list[float]) -> None:
    assert stress(demand) == pytest.approx(want)


def test_noisier_widens_the_swings_around_the_mean() -> None:
    demand = [5.0, 7.0] * 20
    out = noisier(demand)
    middle = slice(8, 32)
    assert max(out[middle]) - min(out[middle]) == pytest.approx(1.5 * 2.0, abs=0.1)  # the swing of 2 x 1.5


def test_burstiest_days_and_stressed_copies() -> None:
    calm, bursty = [2.0] * 1440, ([2.0] * 50 + [8.0] * 50) * 14 + [2.0] * 40
    demand = tuple(calm + bursty + calm + calm)
    assert burstiest_days(demand, 4 * 1440) == [0, 1]  # the bursty day, then the first of equals
    assert burstiest_days(demand, 3 * 1440, count=1) == [1]
    copies = stressed_copies(Trace(T0, demand), 3 * 1440)
    assert set(copies) == {"busier", "sharper", "noisier"}
    assert all(len(c.demand) == 2 * 1440 for c in copies.values())
    assert copies["busier"].demand[1440 + 60] == pytest.approx(8.0 * 1.15)
    assert stressed_copies(Trace(T0, demand[:600]), 600) == {}  # under a day: nothing to stress


def _space() -> tuple[Space, dict[str, Any]]:
    settings = build_settings(yaml.safe_load(BASE), env={}, replay=True)
    space = Space(settings, "gpu")
    cand = {"scale_out.mode": "step", "scale_out.step": 2, "scale_out.cooldown": 180, "scale_out.headroom": None,
            "scale_in.mode": "step", "scale_in.step": 1, "scale_in.cooldown": 600, "scale_in.delay_after_scale_out": 0,
            "rules.0.above": 90, "rules.0.for": 0, "rules.1.below": 40, "rules.1.for": 300}
    return space, cand


def test_steadier_variants_add_headroom_or_wait_longer_to_scale_in() -> None:
    space, cand = _space()
    roomier, calmer = steadier(space, cand)
    assert roomier == {**cand, "scale_out.headroom": {"fraction": 0.1}}
    assert calmer == {**cand, "rules.1.for": 600, "scale_in.cooldown": 900}  # the scale-out rule's `for` kept
    top = {**cand, "scale_out.headroom": {"nodes": 6}, "rules.1.for": 1800, "scale_in.cooldown": 1800}
    assert steadier(space, top) == []  # already at the end of each grid


def test_finalists_behave_differently_and_bring_their_variants() -> None:
    space, cand = _space()
    same = {**cand, "scale_out.cooldown": 300}  # figures identical to cand's: not a second finalist
    safer = {**cand, "rules.0.above": 80}
    over = {**cand, "rules.0.above": 95}
    results = [(cand, score(100, 40, 10, 12)), (same, score(100, 40, 10, 12)), (safer, score(104, 10, 8, 4)),
               (over, score(90, 80, 5, 30))]
    out = finalists(space, results, Budget(50, 14, 20))
    assert out[:2] == [cand, safer]  # the cheapest within; the cheapest with a quarter of the budget left
    assert over not in out and same not in out
    assert set(map(repr, out[2:])) == {repr(v) for c in (cand, safer) for v in steadier(space, c)}


def judged(hours: float, worst: int, changes: int, headroom: Any = None, stress_worst: int = 0,
           scale_in_for: int = 300) -> Judged:
    cand = {"scale_out.headroom": headroom, "rules.1.for": scale_in_for, "i": hours}
    return Judged(cand, score(hours, worst, changes, worst, (changes,)), (score(hours, stress_worst, 0),))


@pytest.mark.parametrize("finals,budget,limit,want,flag", [
    pytest.param([judged(100, 10, 3), judged(120, 5, 1)], 14, 6, 100, "robust",
                 id="cheapest-whose-worst-day-holds"),
    pytest.param([judged(100, 10, 3, stress_worst=29), judged(120, 5, 1)], 14, 6, 120, "robust",
                 id="a-stressed-day-over-twice-the-budget-rules-it-out"),
    pytest.param([judged(100, 10, 3, stress_worst=28), judged(120, 5, 1)], 14, 6, 100, "robust",
                 id="a-stressed-day-within-twice-the-budget-holds"),
    pytest.param([judged(100, 15, 3), judged(120, 5, 1)], 14, 6, 120, "robust",
                 id="a-history-day-over-the-budget-rules-it-out"),
    pytest.param([judged(100, 10, 5), judged(100.8, 10, 2)], 14, 6, 100.8, "robust",
                 id="near-equal-fewer-direction-changes-wins"),
    pytest.param([judged(100, 10, 2), judged(100.8, 10, 2, headroom={"nodes": 1})], 14, 6, 100.8, "robust",
                 id="near-equal-same-changes-more-headroom-wins"),
    pytest.param([judged(100, 10, 2), judged(100.8, 10, 2, scale_in_for=900)], 14, 6, 100.8, "robust",
                 id="near-equal-longer-scale-in-for-wins"),
    # issue 47 round 13: steadiness bought with 2-3% more node-hours on the history cost the unseen days their cost
    # goal (inference, search seed 2: 80% of the days met it with the cheapest finalists, 8% with the steadiest)
    pytest.param([judged(100, 10, 5), judged(102, 10, 2)], 14, 6, 100, "robust",
                 id="two-percent-dearer-is-not-near-equal"),
    pytest.param([judged(100, 10, 5), judged(110, 10, 2)], 14, 6, 100, "robust",
                 id="not-near-equal-the-cheaper-stays"),
    pytest.param([judged(100, 10, 9), judged(150, 10, 8)], 14, 6, 100, "robust_changes_over",
                 id="none-calm-enough-the-near-equal-cheapest-said-so"),
    pytest.param([judged(100, 30, 1), judged(150, 20, 1)], 14, 6, 150, "robust_over",
                 id="none-holds-the-day-least-saturated-worst-day"),
])
def test_pick(finals: list[Judged], budget: int, limit: int, want: float, flag: str) -> None:
    best, got = pick(finals, budget, limit)
    assert best.candidate["i"] == want and got == flag


def test_pick_holds_the_history_and_the_stressed_days_to_their_own_limits() -> None:
    """The tuner lets a day of the history reach 1.5 times the day's budget (14 -> 21) while a stressed day keeps
    twice the budget itself (28), not twice the history's limit."""
    bold, calm = judged(100, 20, 3, stress_worst=28), judged(120, 5, 1)
    assert pick([bold, calm], 14, 6)[0].candidate["i"] == 120  # a history day over the budget rules it out
    assert pick([bold, calm], 21, 6, stressed_budget=28)[0].candidate["i"] == 100
    hot = judged(100, 20, 3, stress_worst=29)
    assert pick([hot, calm], 21, 6)[0].candidate["i"] == 100  # default: twice the history's limit (42)
    assert pick([hot, calm], 21, 6, stressed_budget=28)[0].candidate["i"] == 120


def test_pick_keeps_the_span_margin_the_search_kept() -> None:
    """A steadier variant the search never scored may keep every day's budget and still spend more of the span
    than the margin the search chose under: with ``total`` it is ruled out, without it it wins."""
    spender = Judged({"i": 100}, score(100, 60, 2, 12, (2,)), (score(100, 0, 0),))
    frugal = Judged({"i": 110}, score(110, 40, 3, 10, (3,)), (score(110, 0, 0),))
    assert pick([spender, frugal], 14, 6)[0].candidate["i"] == 100
    assert pick([spender, frugal], 14, 6, total=50)[0].candidate["i"] == 110


def _judging() -> tuple[int, dict[str, Trace]]:
    """Two days of a bursty history set up for the tuner's replays (in this process), and their stressed copies."""
    day = ([2.0] * 90 + [6.0] * 60 + [3.0] * 90) * 6
    trace = Trace(T0, tuple(day + day))
    stressed = stressed_copies(trace, len(trace.demand))
    make_pool(1, yaml.safe_load(BASE), {}, "gpu", trace, stressed)  # one worker: evaluated here, no pool
    return len(trace.demand), stressed


def test_judging_stops_once_the_rest_could_not_be_picked_and_picks_the_same() -> None:
    """Finalists go to the stressed copies cheapest first, a wave at a time; once the cheapest that holds is known,
    those costing more than PICK_NEAR above it are not judged (the pick could not take them): the same choice, fewer
    replays. Without one that holds, every finalist is judged."""
    space, cand = _space()
    cands = [{**cand, "scale_out.headroom": room} for room in
             (None, {"nodes": 1}, {"nodes": 2}, {"nodes": 3}, {"nodes": 4}, {"nodes": 6})][::-1]  # dearest first
    train, stressed = _judging()
    full = judge(None, cands, [], train, stressed)
    costs = sorted(j.history.cost for j in full)
    assert len(full) == 6 and costs[JUDGE_WAVE] > costs[0] * (1 + PICK_NEAR)  # the wave after the first could not win
    lenient = Rule(day_budget=1440, changes=None, stressed_budget=2880)  # every finalist holds
    lazy = judge(None, cands, [], train, stressed, holds=lenient.holds)
    assert len(lazy) == JUDGE_WAVE and lazy == [j for j in full if j in lazy]  # the cheapest wave, in cands' order
    assert pick(lazy, 1440, None, stressed_budget=2880) == pick(full, 1440, None, stressed_budget=2880)
    none_holds = Rule(day_budget=-1, changes=None)
    assert judge(None, cands, [], train, stressed, holds=none_holds.holds) == full


def _quiet_history() -> tuple[int, dict[str, Trace]]:
    """Issue 47's image-generation shape: a 1-node pool whose work stays under half a node (bursts of 0.45 nodes),
    so no scale-out alert ever fires: a headroom, applied only by an alert-driven decision, never acts on it. Six
    hours, and one stressed copy of them (busier), to be quick."""
    history = ([0.02] * 100 + [0.45] * 20) * 3
    trace = Trace(T0, tuple(history))
    stressed = {"busier": Trace(T0, tuple(busier(history)))}
    make_pool(1, yaml.safe_load(BASE.replace("initial_count: 3", "initial_count: 1")), {}, "gpu", trace, stressed)
    return len(trace.demand), stressed


def test_a_headroom_the_history_never_used_is_not_bought() -> None:
    """Issue 47, real weeks: on a small bursty pool whose history never fired a scale-out, every headroom costs the
    same on the history (it never acted), so the pick's steadiest-of-the-near-equal took the largest (6 nodes);
    the first burst after it raised the pool to 7 nodes for good (2.7x foresight where cluster-autoscaler kept
    1.0x). The pick now takes such a candidate without its headroom: nothing the history shows is given up."""
    space, cand = _space()
    train, stressed = _quiet_history()
    cands = [{**cand, "scale_out.headroom": room} for room in (None, {"nodes": 1}, {"nodes": 6})]
    finals = judge(None, cands, [], train, stressed)
    assert len({(j.history.cost, j.worst_day, j.stressed[0].cost) for j in finals}) == 1  # all alike
    rule = Rule(day_budget=21, changes=2, stressed_budget=28)
    old = pick(finals, rule.day_budget, rule.changes, stressed_budget=rule.stressed_budget)[0]
    assert old.candidate["scale_out.headroom"] == {"nodes": 6}  # the steadiest of equals: the most headroom
    best, flag = settle(None, finals, rule, train, stressed)
    assert best.candidate["scale_out.headroom"] is None and flag == "robust"


def test_a_headroom_the_history_used_is_still_the_steadier_pick() -> None:
    """Where the headroom acted (its figures differ from the same settings without it), settle picks as pick does:
    here a node of headroom costs 0.6% more than none and saves 90% of the direction changes."""
    space, cand = _space()
    train, stressed = _judging()
    calm = {**cand, "rules.1.below": 70, "scale_in.step": 2}
    finals = judge(None, [{**calm, "scale_out.headroom": room} for room in (None, {"nodes": 1})], [], train, stressed)
    assert finals[0].history.cost < finals[1].history.cost < finals[0].history.cost * (1 + PICK_NEAR)
    lenient = Rule(day_budget=1440, changes=None, stressed_budget=2880)
    got = settle(None, finals, lenient, train, stressed)
    assert got == pick(finals, 1440, None, stressed_budget=2880) and got[0].candidate["scale_out.headroom"]


def test_the_near_equal_stay_under_cluster_autoscaler_with_a_pause_node() -> None:
    """Issue 47, real weeks (a recommendation service steady at 47-48 nodes): a node of headroom cost 2% more,
    within the near-equal band (then 3%), so the steadiest of the near-equal kept it and cost what
    cluster-autoscaler with one pause node costs. At 120 nodes a spare one is under 1%, within the band still:
    with that peer's node-hours on the tuning span as the ceiling, the near-equal under it win; where none is under
    it, the pick is as before."""
    lean, spare = judged(120 * 120, 0, 0), judged(121 * 120, 0, 0, headroom={"nodes": 1})
    assert pick([lean, spare], 14, 6)[0] is spare
    assert pick([lean, spare], 14, 6, ceiling=121 * 120)[0] is lean
    assert pick([lean, spare], 14, 6, ceiling=120 * 120)[0] is spare  # none under it: steadiness as before
    assert settle(None, [lean, spare], Rule(14, 6, ceiling=121 * 120), 1440, {})[0] is lean


def test_a_large_pool_s_space_holds_thresholds_that_follow_whole_nodes() -> None:
    """Issue 47, real weeks (a service at 47-48 nodes, 98% busy): with above <= 95 and below <= 70 every candidate
    kept a spare node or more (1.04x foresight, above cluster-autoscaler with a pause node, 1.03x). A history
    whose mean level is 47.3 nodes adds above 99 (half a node short of full) and below 95 and 97 (two and a half,
    one and a half nodes idle); a small pool's grids are as they were."""
    settings = build_settings(yaml.safe_load(BASE), env={}, replay=True)
    small, large = Space(settings, "gpu", level=5.0), Space(settings, "gpu", level=47.3)
    assert small.grid("rules.0.above") == ABOVE and small.grid("rules.1.below") == BELOW
    assert large.grid("rules.0.above") == (*ABOVE, 99) and large.grid("rules.1.below") == (*BELOW, 95, 97)
    assert fine_thresholds(19.9) == ((), ())


@pytest.mark.parametrize("candidate,level,want", [
    pytest.param({"rules.0.pending_above": 8, "scale_out.headroom": None}, 4.5, True, id="a-node-of-gpus-no-headroom"),
    pytest.param({"rules.0.pending_above": 16}, 4.5, True, id="two-nodes-no-headroom-key"),
    pytest.param({"rules.0.pending_above": 8, "scale_out.headroom": {"fraction": 0.1}}, 4.5, True,
                 id="under-half-a-node-of-headroom-at-4.5-nodes"),
    pytest.param({"rules.0.pending_above": 4, "scale_out.headroom": None}, 4.5, False, id="half-a-node-scales-out"),
    pytest.param({"rules.0.pending_above": 16, "scale_out.headroom": {"fraction": 0.25}}, 8.7, False,
                 id="two-nodes-of-headroom-at-8.7-nodes"),
    pytest.param({"rules.0.pending_above": 8, "scale_out.headroom": {"nodes": 1}}, 4.5, False, id="a-spare-node"),
    pytest.param({"rules.0.above": 95, "scale_out.headroom": None}, 4.5, False, id="a-utilisation-rule"),
])
def test_a_pending_threshold_of_a_whole_node_without_a_spare_node_is_passed_over(candidate: dict[str, Any],
                                                                                 level: float, want: bool) -> None:
    """Issue 47, the GPU cluster's real weeks: `pending_above: 8` on 8-GPU nodes with no headroom kept 2.06% of the
    week saturated and 5.33% of the 27 days after (worst day 49%): up to a node of work waits as long as it stays
    under a node. The choice passes such candidates over, unless a node or more of headroom keeps spare."""
    assert leaves_a_node_waiting(candidate, 8, level) is want
    assert leaves_a_node_waiting(candidate, None, level) is False  # no GPUs a node known: nothing to compare with
