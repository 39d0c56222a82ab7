"""How far the tuner's space reaches on a family's unseen days: the same knobs the tuner searches
(``autoscaler/replay/space.py``), but each point scored on the unseen days of ``bench.tune`` themselves (the share of
days meeting issue 37's goal, then the mean node-hours over foresight), by random draws and then rounds of
neighbours of the best. No tuner can choose better than the best point there is on the days it is judged on, so the
figure bounds what any choice rule can reach with today's settings; since the search is not exhaustive, the best it
finds is a lower bound of that best (a point it missed may do better). It reads the days the tuner must never see:
a diagnostic of the space, never a way to tune.

``python -m bench.reach --family diurnal_inference`` (``--base`` another base config, e.g. one with other
Alertmanager timing; ``--candidates``, ``--rounds``); prints JSON: the best points with their verdicts and settings.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import random
from typing import Any

from autoscaler.config.load import build_settings, offline
from autoscaler.replay.sim import replay_pool
from autoscaler.replay.space import Candidate, Space, apply, busy_windows, describe, settings_text
from autoscaler.replay.tune_cli import DEFAULT_HOLDOUT, _load
from bench.tune import FAMILIES, START, Family, generate, judge_day, unseen, verdict

_WORK: dict[str, Any] = {}


def _init(base: str, family: str, smoke: bool) -> None:
    fam = FAMILIES[family]
    raw, settings = _load(base)
    _WORK.update(raw=raw, pool=replay_pool(settings), fam=fam,
                 days=[d for _, d in unseen(family, fam, smoke)])


def score(candidate: Candidate) -> dict[str, Any]:
    """The verdict of one point of the space on the unseen days (``bench.tune.verdict``)."""
    fam: Family = _WORK["fam"]
    settings = build_settings(offline(apply(_WORK["raw"], _WORK["pool"], candidate)), replay=True)
    return verdict([judge_day(settings, d)["run"] for d in _WORK["days"]], fam.goal, fam.budget)


def held(got: dict[str, Any], budget: float) -> bool:
    """Whether the worst day stayed within twice the budget (issue 37's "done when", besides the share)."""
    return got["worst_saturated_pct"] <= 2 * budget


def rank(result: tuple[Any, dict[str, Any]]) -> tuple[float, float]:
    """(A point, its verdict), better first: more days meeting the goal, then fewer node-hours over foresight (the
    tuner's points here, bench.bound's rules there)."""
    return -result[1]["meet_goal_pct"], result[1]["mean_x"]


def reach(family: str, base: str | None = None, candidates: int = 150, rounds: int = 4, top: int = 8,
          neighbours: int = 6, seed: int = 1, workers: int = 2, smoke: bool = False) -> dict[str, Any]:
    """Search the space of ``base`` (default: the family's base config) scored on the unseen days; the best points
    (``best``, ``top`` of them; ``best_held``: those whose worst day stayed within twice the budget), how many were
    tried, and the base config's own verdict."""
    fam = FAMILIES[family]
    base = base or fam.base
    _, settings = _load(base)
    pool = replay_pool(settings)
    week = generate(family, days=2 if smoke else 7, seed=fam.week_seed)
    # the busy-hours windows offered are those of the part of the week ``replay --tune`` tunes on (its default holdout)
    space = Space(settings, pool, busy_windows(week[:int(round(len(week) * (1 - DEFAULT_HOLDOUT)))], START))
    rng = random.Random(seed)
    seen: dict[str, tuple[Candidate, dict[str, Any]]] = {}
    with multiprocessing.get_context("fork").Pool(workers, _init, (base, family, smoke)) as executor:
        def run(batch: list[Candidate]) -> None:
            fresh = {settings_text(c): c for c in batch if settings_text(c) not in seen}
            for (text, cand), got in zip(fresh.items(), executor.map(score, list(fresh.values()))):
                seen[text] = (cand, got)

        run([describe(settings, pool, space.windows)] + [space.sample(rng) for _ in range(candidates)])
        for _ in range(rounds):
            best = sorted(seen.values(), key=rank)[:top]
            run([space.mutate(rng, cand) for cand, _ in best for _ in range(neighbours)])
    ranked = sorted(seen.values(), key=rank)
    base_text = settings_text(describe(settings, pool, space.windows))
    return {"family": family, "base_config": base, "goal": fam.goal.__dict__, "days": seen[base_text][1]["days"],
            "tried": len(seen), "base": seen[base_text][1],
            "best": [{"verdict": got, "settings": settings_text(cand), "candidate": cand}
                     for cand, got in ranked[:top]],
            # the best whose worst day stayed within twice the budget (the search itself ranks by share alone)
            "best_held": [{"verdict": got, "settings": settings_text(cand), "candidate": cand}
                          for cand, got in ranked if held(got, fam.budget)][:top]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--base", help="the base config whose space is searched (default: the family's)")
    parser.add_argument("--candidates", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    out = reach(args.family, args.base, args.candidates, args.rounds, seed=args.seed, workers=args.workers)
    for entry in out["best"] + out["best_held"]:
        entry.pop("candidate", None)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
