"""The tuner judges candidates on the history as the weeks after it will look (issue 47): moved along its own trend,
a one-off peak capped; a flat history, or a peak that recurs, is judged as it was."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.config.load import build_settings
from autoscaler.replay.outlook import HORIZON_DAYS, LONE, MAX_GROWTH, lone_peaks, outlook, peak, trend
from autoscaler.replay.space import describe
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.tune import Budget, _init, choose, evaluate
from bench.traces.make_traces import generate
from tests.support.replay_cases import BASE, write_trace

T0 = parse_time("2025-01-06T00:00:00Z")
DAY = 1440


def _day(level: float) -> list[float]:
    """One day: a night at a third of ``level``, a working day (08-20) at ``level``, a little wobble."""
    return [round((level if 480 <= m < 1200 else level / 3) * (1 + 0.03 * math.sin(m / 7)), 3) for m in range(DAY)]


def _week(levels: list[float]) -> tuple[float, ...]:
    return tuple(d for level in levels for d in _day(level))


def test_a_flat_history_is_judged_as_it_was() -> None:
    demand = tuple(round(d, 2) for d in generate("diurnal_inference", days=5, seed=101))
    look = outlook(Trace(T0, demand), 5 * DAY)
    assert not look.changed and look.demand == demand and look.lone_peaks == ()
    # a plateau whose level moves from day to day (the noisy_plateau bench week: +16% a day fitted, t = 1.96) is
    # scatter, not a trend
    plateau = tuple(round(d, 2) for d in generate("noisy_plateau", days=5, seed=31))
    look = outlook(Trace(T0, plateau), 5 * DAY)
    assert look.growth_per_day > 0.1 and look.kept == 0 and not look.changed


def test_a_growing_history_is_judged_at_its_level_a_week_ahead() -> None:
    growth = 0.03  # 3% a day, on a log scale
    levels = [6 * math.exp(growth * d) for d in range(5)]
    slope, t = trend(levels)
    assert slope == pytest.approx(growth) and t == math.inf  # a perfect line
    look = outlook(Trace(T0, _week(levels)), 5 * DAY)
    assert look.changed and look.kept == pytest.approx(1.0)
    # each minute moved to the level HORIZON_DAYS after the span: the last day by about exp(3% x 7.5 days)
    last = look.demand[4 * DAY + 600] / _week(levels)[4 * DAY + 600]
    assert last == pytest.approx(math.exp(growth * (HORIZON_DAYS + 1 - 600 / DAY)), rel=1e-3)
    # every day now stands at about the same level, the one expected a week after the span
    day_means = [sum(look.demand[d * DAY:(d + 1) * DAY]) / DAY for d in range(5)]
    assert max(day_means) / min(day_means) == pytest.approx(1.0, abs=0.01)
    # a faster growth is held at MAX_GROWTH
    steep = outlook(Trace(T0, _week([4 * math.exp(0.2 * d) for d in range(5)])), 5 * DAY)
    assert steep.factors[1] == pytest.approx(MAX_GROWTH)


def test_a_shrinking_history_is_judged_at_its_last_level_not_below() -> None:
    levels = [8 * math.exp(-0.05 * d) for d in range(5)]
    look = outlook(Trace(T0, _week(levels)), 5 * DAY)
    assert look.factors[0] < 1.0 and look.factors[1] == pytest.approx(1.0, abs=0.03)
    assert max(look.demand[4 * DAY:]) == pytest.approx(max(_week(levels)[4 * DAY:]), rel=0.03)


def test_a_lone_peak_is_capped_at_the_other_days_peak_and_a_recurring_one_is_kept() -> None:
    days = [_day(6) for _ in range(5)]
    days[2][800:860] = [18.0] * 60  # one afternoon at three times the level, once in five days
    demand = tuple(d for day in days for d in day)
    assert lone_peaks(demand, 5 * DAY) == [(2, 18.0, pytest.approx(peak(days[0])))]
    look = outlook(Trace(T0, demand), 5 * DAY)
    assert max(look.demand[2 * DAY:3 * DAY]) == pytest.approx(peak(days[0])) and peak(days[0]) < 18.0 / LONE
    assert look.demand[:2 * DAY] == demand[:2 * DAY]  # the other days as they were
    days[4][700:760] = [18.0] * 60  # the same peak on a second day: it recurs, it is kept
    demand = tuple(d for day in days for d in day)
    assert lone_peaks(demand, 5 * DAY) == [] and not outlook(Trace(T0, demand), 5 * DAY).changed
    # a day busy for hours is a level, not a peak
    days[4][700:760] = days[0][700:760]
    days[2][480:1200] = [18.0] * 720
    assert lone_peaks(tuple(d for day in days for d in day), 5 * DAY) == []


def test_two_days_say_nothing_of_trend_or_recurrence() -> None:
    demand = _day(4) + _day(12)
    look = outlook(Trace(T0, tuple(demand)), 2 * DAY)
    assert not look.changed


# -- the choice, through the replay ---------------------------------------------------------------------
LADDER: tuple[Any, ...] = (None, {"nodes": 1}, {"nodes": 2}, {"nodes": 3}, {"nodes": 4})
BUDGET_PCT = 0.5
#: The base config's settings, sized close to demand (90% utilisation, the alert at 85% at once): its headroom is
#: what keeps the 5-minute boots from saturating the pool.
CLOSE = {"scale_out.target_utilization": 90, "scale_out.max_step": 16, "scale_out.cooldown": 60, "rules.0.above": 85,
         "rules.0.for": 0}


def _working_day(level: float, spikes: tuple[int, ...] = ()) -> list[float]:
    """A third of ``level`` at night, a 30-minute ramp to ``level`` at 08:00 and back at 19:30, four 20-minute surges
    of 30% in the afternoon, and at each of ``spikes`` (minutes) 20 minutes at twice the level."""
    out = []
    for m in range(DAY):
        ramp = min(1.0, max(0.0, (m - 480) / 30), max(0.0, (1200 - m) / 30))
        value = level / 3 + level * 2 / 3 * ramp
        value += sum(0.3 * level for s in (600, 780, 900, 1020) if s <= m < s + 20)
        value += sum(level for s in spikes if s <= m < s + 20)
        out.append(round(value, 3))
    return out


def _choice(demand: tuple[float, ...], judged_on_outlook: bool) -> Any:
    """The headroom the tuner's choice takes among LADDER (the rest as CLOSE), each rung replayed on the span it
    judges (the history, or its outlook) within the tuner's budget for 0.5%: 0.75 of it over the span, 1.5 times it
    on each day."""
    raw = yaml.safe_load(BASE)
    base = {**describe(build_settings(raw, env={}, replay=True), "gpu"), **CLOSE}
    span = outlook(Trace(T0, demand), len(demand)).demand if judged_on_outlook else demand
    _init(raw, {}, "gpu", Trace(T0, span))
    budget = Budget(int(BUDGET_PCT * 0.75 / 100 * len(demand)), int(BUDGET_PCT * 1.5 / 100 * DAY))
    results = []
    for room in LADDER:
        cand = {**base, "scale_out.headroom": room}
        results.append((cand, evaluate(cand, 0, len(demand), None, None)))
    return choose(results, budget)[0]["scale_out.headroom"]


def _rank(room: Any) -> int:
    return LADDER.index(room)


def test_a_growing_history_makes_the_choice_keep_more_headroom_than_the_same_history_flat() -> None:
    """Three days growing 6% a day, ending at the flat history's level: judged as they were (the tuner before issue
    47) they ask for no more headroom than the flat days; judged on the outlook (a week ahead) they ask for more."""
    growing = tuple(d for level in (6, 6 * math.exp(0.06), 6 * math.exp(0.12)) for d in _working_day(level))
    flat = tuple(_working_day(6 * math.exp(0.12)) * 3)
    assert growing[2 * DAY:] == flat[2 * DAY:]  # the same last day
    before, after, level = _choice(growing, False), _choice(growing, True), _choice(flat, True)
    assert _rank(before) <= _rank(level) < _rank(after)


def test_a_lone_spike_does_not_buy_its_headroom() -> None:
    """Three days, the second with three 20-minute spikes to twice the level: judged as it was, the choice keeps
    headroom for the spikes (the tuner before issue 47); judged on the outlook, the headroom of the days without."""
    calm = tuple(_working_day(6) * 3)
    spiky = tuple(_working_day(6) + _working_day(6, (700, 840, 960)) + _working_day(6))
    assert outlook(Trace(T0, spiky), 3 * DAY).lone_peaks[0][0] == 1
    before, after, without = _choice(spiky, False), _choice(spiky, True), _choice(calm, True)
    assert after == without and _rank(before) > _rank(after)


def test_tune_judges_on_the_outlook_and_reports_the_history_as_it_was(tmp_path: Path) -> None:
    """Through ``replay --tune``: the lone spike is said in tuning.json, the candidates were judged without it, and
    the report's tuning span is the chosen settings on the history as it was (the spike's nodes counted)."""
    (tmp_path / "base.yaml").write_text(BASE)
    demand = _working_day(6) + _working_day(6, (700, 840, 960)) + _working_day(6) + _working_day(6)
    trace = write_trace(tmp_path / "history.csv", demand)
    code = main(["replay", "--tune", "--config", str(tmp_path / "base.yaml"), "--trace", str(trace),
                 "--max-saturated", "0.5%", "--out", str(tmp_path / "out"), "--candidates", "3", "--holdout", "0.25",
                 "--workers", "1", "--no-stress"])
    assert code == 0
    data = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert [p["day"] for p in data["outlook"]["lone_peaks"]] == [2] and data["outlook"]["growth_kept"] == 0
    tune = data["spans"]["tune"]
    history, judged = tune["tuned"], tune["tuned_on_outlook"]
    assert history["days"][0] == judged["days"][0]  # the day before the spike: the same
    assert history["days"][1][0] > judged["days"][1][0]  # the spike's day: the pool grew for it on the history
