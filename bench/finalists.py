"""What the tuner's pick had to choose from (issue 47 round 13): tune a family's week as ``bench.tune --tune`` does,
then replay every finalist the pick judged (``tuning.json``'s ``stressed.finalists[].knobs``) on the family's 25
unseen days. It reads the judged days: a diagnostic of the choice, never a way to tune.

``python -m bench.finalists --family F [--seed S]``: one line per finalist, cheapest first (cost and worst days on
the history as the pick saw them; share of unseen days meeting the goal, within the budget, mean x; * the pick).
"""
from __future__ import annotations

import argparse
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from autoscaler.config.load import build_settings, load_replay_config, offline
from autoscaler.replay.sim import replay_pool
from autoscaler.replay.space import apply
from autoscaler.replay.tune_cli import tune
from bench.traces.make_traces import generate
from bench.tune import FAMILIES, judge_day, unseen, verdict, write_trace


def judged(family: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """The finalist's verdict on the family's unseen days."""
    fam = FAMILIES[family]
    raw, settings = load_replay_config(fam.base)
    tuned = build_settings(offline(apply(raw, replay_pool(settings), knobs)), env=dict(os.environ), replay=True)
    return verdict([judge_day(tuned, d)["run"] for _, d in unseen(family, fam, False)], fam.goal, fam.budget)


def run(family: str, seed: int) -> list[str]:
    fam = FAMILIES[family]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "week.csv")
        write_trace(path, [round(d, 2) for d in generate(family, days=7, seed=fam.week_seed)])
        data = tune(fam.base, path, os.path.join(tmp, "out"), fam.budget, seed=seed, quiet=True)
    finals = sorted(data["stressed"]["finalists"], key=lambda f: f["cost"])
    with ProcessPoolExecutor(2) as pool:
        verdicts = list(pool.map(judged, [family] * len(finals), [f["knobs"] for f in finals]))
    rows = [f"{family}, search seed {seed}: pick {data['stress_choice']}, {len(finals)} finalists judged"]
    for final, got in zip(finals, verdicts):
        mark = "*" if final["knobs"] == data["tuned"] else " "
        rows.append(f"{mark} cost {final['cost']:9.1f}  worst day {final['worst_day_saturated']:4d} sat min "
                    f"{final['worst_day_direction_changes']:3d} changes  stressed {final['stressed_worst_days']}  | "
                    f"unseen: goal met {got['meet_goal_pct']:5.1f}%  in budget {got['within_budget_pct']:5.1f}%  "
                    f"mean x {got['mean_x']:.3f}  worst day {got['worst_saturated_pct']:.2f}%")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--seed", type=int, default=0, help="the search's seed")
    args = parser.parse_args(argv)
    print("\n".join(run(args.family, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
