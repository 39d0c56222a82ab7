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
from bench.tune import FAMILIES, START, by_seed, judge_day, run, seed_range, seeds_table, unseen, verdict


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


def test_by_seed_gives_each_seeds_own_verdict_and_their_mean() -> None:
    """``bench.tune --tune --seeds``: each seed's verdict is the one a single-seed run gives, and the mean is theirs
    (smoke-sized: a two-day week, 27 draws, three unseen days)."""
    res = by_seed("noisy_plateau", "default", seed_range("0-1"), smoke=True)
    one = run(smoke=True, only=("noisy_plateau",), rules=("default",), seed=1)
    assert res["seeds"][1] == one["families"]["noisy_plateau"]["verdict"]["default"]
    # by_seed judges the tuned settings only: the base config and the peers, which no seed changes, once at most
    assert {"base", "cluster_autoscaler", "default"} <= set(one["families"]["noisy_plateau"]["verdict"])
    alone = run(smoke=True, only=("noisy_plateau",), rules=("default",), seed=1, others=False)
    assert alone["families"]["noisy_plateau"]["verdict"] == {"default": res["seeds"][1]}
    shares = [res["seeds"][s]["meet_goal_pct"] for s in (0, 1)]
    assert res["mean_meet_goal_pct"] == round(sum(shares) / 2, 1)
    held = sum(res["seeds"][s]["worst_saturated_pct"] <= 2 * FAMILIES["noisy_plateau"].budget for s in (0, 1))
    assert res["worst_day_within_twice_budget"] == held
    assert seed_range("3,5") == [3, 5] and seeds_table(res)[-1].startswith(f"  mean {res['mean_meet_goal_pct']:.1f}%")
