"""bench/finalists.py replays a finalist from the knobs tuning.json keeps: the base config's own knobs, applied to
the base config, give the base config's verdict on the unseen days (the knobs say all a candidate is)."""
from __future__ import annotations

from autoscaler.config.load import load_replay_config
from autoscaler.replay.robust import Judged, as_json
from autoscaler.replay.sim import replay_pool
from autoscaler.replay.space import busy_windows, describe
from autoscaler.replay.tune import Score
from bench.finalists import judged
from bench.traces.make_traces import generate
from bench.tune import FAMILIES, START, judge_day, unseen, verdict


def test_a_finalists_knobs_replay_as_the_config_they_came_from() -> None:
    family = "noisy_plateau"
    fam = FAMILIES[family]
    _, settings = load_replay_config(fam.base)
    week = generate(family, days=1, seed=fam.week_seed)
    knobs = describe(settings, replay_pool(settings), busy_windows(week, START))
    kept = as_json(Judged(knobs, Score(1.0, 0, 0, 1440), ()))["knobs"]
    assert kept == knobs and kept is not knobs
    want = verdict([judge_day(settings, d)["run"] for _, d in unseen(family, fam, False)], fam.goal, fam.budget)
    assert judged(family, kept) == want
