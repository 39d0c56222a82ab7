"""How the search screens: its first rungs on days pooled from every searched day (autoscaler/replay/pooled.py),
and a hill-climb neighbour stopped once a day breaks the day's limit."""
from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import yaml

from autoscaler.config.load import build_settings, offline
from autoscaler.replay.pooled import NAME, junctions, pooled, pooled_order, scored, slices, warm
from autoscaler.replay.space import Candidate, describe
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.sim import Minute
from autoscaler.replay.tune import Score, Search, _init, _Stop, choose, evaluate
from bench.traces.make_traces import generate
from tests.support.replay_cases import BASE

T0 = parse_time("2025-01-06T00:00:00Z")


@pytest.mark.parametrize("days", [2, 3, 5, 7])
def test_pooled_days_are_a_latin_square_of_the_searched_days(days: int) -> None:
    """Every minute of the days at most once among those that count (all but the warm-ups), each at its own minute
    of the day; every pooled day made of a slice of every searched day; and each slice met as the history had it:
    its warm-up is the history's minutes just before it, not counted."""
    order, counts = pooled_order(days), scored(days)
    assert len(order) == len(counts) == days * 1440
    counted = [m for m, c in zip(order, counts) if c]
    assert len(set(counted)) == len(counted) == days * 1440 - (days * days - 1) * warm(days)
    assert all(minute % 1440 == at % 1440 for at, minute in enumerate(order))
    for day in range(days):
        assert {m // 1440 for m, c in zip(order[day * 1440:(day + 1) * 1440], counts[day * 1440:]) if c} \
            == set(range(days))
    lead = warm(days)
    for start in junctions(days):
        assert order[start - lead:start + 1] == list(range(order[start] - lead, order[start] + 1))
        assert not any(counts[start - lead:start]) and counts[start]
    assert slices(days)[-1][1] == 1440 and slices(days)[0][0] == 0 and 0 < lead <= 1440 // days // 3


def test_nothing_to_pool_under_two_whole_days() -> None:
    trace = Trace(T0, tuple(float(i % 7) for i in range(2000)))
    assert pooled(trace, 2000) is None
    two = pooled(Trace(T0, tuple(float(i) for i in range(3000))), 2880)
    assert two is not None and len(two.demand) == 2880 and two.demand[720] == 1440 + 720
    assert two.demand[719] == 1440 + 719  # the slice's warm-up: the minute before it in the history


class _Listed:
    """A tiny search space: the given candidates, drawn at random (Search's sample/mutate protocol)."""

    def __init__(self, cands: list[Candidate]) -> None:
        self.cands = cands

    def sample(self, rng: random.Random) -> Candidate:
        return dict(rng.choice(self.cands))

    def mutate(self, rng: random.Random, candidate: Candidate) -> Candidate:
        return dict(rng.choice(self.cands))


@pytest.fixture(scope="module")
def busy_first_day() -> dict[str, Any]:
    """Three days of the inference family, the first 1.5x busier; twelve candidates (headroom, the scale-out rule's
    threshold and ``for``), every one of them scored on the whole span (the exhaustive answer)."""
    raw = yaml.safe_load(BASE)
    base = describe(build_settings(offline(raw), env={}, replay=True), "gpu")
    knobs: dict[str, tuple[Any, ...]] = {"scale_out.headroom": (None, {"nodes": 1}, {"nodes": 2}),
                                         "rules.0.above": (75, 90), "rules.0.for": (0, 60)}
    cands = [{**base, **dict(zip(knobs, values))} for values in itertools.product(*knobs.values())]
    demand = tuple(round(x * (1.5 if day == 0 else 1.0), 2) for day in range(3)
                   for x in generate("diurnal_inference", days=1, seed=3 + day))
    trace = Trace(T0, demand)
    _init(raw, {}, "gpu", trace, {NAME: pooled(trace, 4320)})
    every: list[tuple[Candidate, Score]] = [(c, evaluate(c, 0, 4320, None, None)) for c in cands]
    return {"cands": cands, "every": every}


def _search(cands: list[Candidate], pooled_minutes: int) -> Search:
    # a 0.5% budget less the 25% margin over the span, 1.5x it on a day; eta 2: twelve draws, two rungs
    return Search(_Listed(cands), 4320, 0.375, day_pct=0.75, candidates=12, eta=2, neighbours=0, rounds=0, seed=1,
                  pooled=pooled_minutes)  # type: ignore[arg-type]


def test_the_screened_search_keeps_the_exhaustive_best(busy_first_day: dict[str, Any]) -> None:
    """Twelve draws screened on the first day and a half, the best six on the whole span: the choice is the one an
    exhaustive search makes, on a first day 1.5x busier than the others."""
    cands, every = busy_first_day["cands"], busy_first_day["every"]
    search = _search(cands, 0)
    budget = search.budget(4320)
    best = choose(every, budget)[1]
    search.run(None, lambda _: None)
    assert search.rungs() == [2160, 4320] and search.evaluated == 12 + 6
    found = choose(search.results, budget)[1]
    assert (found.cost, found.saturated_minutes) == (best.cost, best.saturated_minutes)


def test_a_pooled_screen_counts_only_the_slices_not_their_warm_ups(busy_first_day: dict[str, Any]) -> None:
    """``--pooled`` (not the default: BENCHMARKS.md round 11): the first rung replays the pooled days and counts the
    minutes of the slices only, and its budget is a share of those."""
    cand = busy_first_day["cands"][0]
    counted = sum(scored(3)[:2160])
    score = evaluate(cand, 0, 2160, None, None, NAME)
    assert score.minutes == counted < 2160
    assert _search(busy_first_day["cands"], 4320)._counted(2160) == counted


def test_a_neighbour_stops_once_a_day_is_over_the_days_limit() -> None:
    """Within the span's budget but over the day's: it could be neither the choice nor a finalist."""
    stop = _Stop(budget=100, bound=None, per_day=5)
    calm = [Minute(T0 + 60 * i, 1.0, 2, 2, 50.0, ()) for i in range(1440)]
    short = [Minute(T0 + 60 * (1440 + i), 3.0, 2, 2, 100.0, ()) for i in range(10)]
    assert not any(stop(m) for m in calm)
    assert [stop(m) for m in short[:6]] == [False] * 5 + [True] and stop.why == "saturated"
    again = _Stop(budget=100, bound=None, per_day=5)  # five short minutes a day, every day: never stopped
    days = [Minute(T0 + 60 * i, 3.0 if i % 1440 < 5 else 1.0, 2, 2, 0.0, ()) for i in range(3 * 1440)]
    assert not any(again(m) for m in days) and again.saturated == 15
