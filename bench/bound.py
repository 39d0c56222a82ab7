"""How far an idealised reactive scaler reaches on a family's unseen days (issue 37): a yardstick for the goal, not
for the service. The scaler below sees each minute's demand as it happens (no alert, no evaluation interval, no
``for``, no Alertmanager timing), asks for exactly the nodes it lacks, removes nodes the moment its rule says so, and
keeps spare nodes by hour of day; only the boot (nodes ready ``boot`` minutes after they are asked for) and its own
rule stand between it and perfect foresight. Its points are searched as ``bench.reach`` searches the tuner's space:
random draws, then rounds of neighbours of the best, each point scored on the unseen days of ``bench.tune`` with the
same figures (node-hours over foresight, saturated minutes, direction changes) and the same goal.

What it says: the best any rule of this shape reaches with that boot when chosen on the judged days themselves
(``best``; ``best_held``: those whose worst day keeps twice the budget), and ``any_point``: the share of days some
point tried meets the goal on (each day its own choice, a bound no fixed setting reaches). It does not bound every
possible scaler: a rule of another shape may do better. It reads the days the tuner must never see.

``python -m bench.bound --family training_queue [--boot 2] [--lag 2] [--seed 2]``; prints JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from bench.reach import held, rank
from bench.tune import FAMILIES, Family, unseen, verdict

BUSY_HOURS = (8, 20)  # UTC hours where ``spare_day`` holds (the families' working hours)


@dataclass(frozen=True)
class Rule:
    """One idealised scaler. Nodes wanted: ceil(demand x (1 + fraction) + spare), spare by hour, never below ``low``
    (or ``floor_day`` in the busy hours). Scale-out to that at once; scale-in to the same figure computed on the most
    demand of the last ``window`` minutes, only when it frees at least ``min_in`` nodes, at most ``max_in`` at a time
    and one scale-in per ``cooldown`` minutes."""

    spare_day: int = 0
    spare_night: int = 0
    fraction: float = 0.0
    window: int = 0
    cooldown: int = 0
    min_in: int = 1
    max_in: int = 1000
    floor_day: int = 0


GRID: dict[str, tuple[Any, ...]] = {
    "spare_day": (0, 1, 2, 3, 4, 5), "spare_night": (0, 1, 2, 3, 4), "fraction": (0.0, 0.05, 0.1, 0.2),
    "window": (0, 15, 30, 45, 60, 90, 120, 180, 240), "cooldown": (0, 5, 10, 20, 40), "min_in": (1, 2, 3),
    "max_in": (1, 2, 4, 1000), "floor_day": (0, 4, 6, 8, 10, 12)}


def replay(demand: Sequence[float], rule: Rule, boot: int, low: int = 1, lag: int = 0) -> dict[str, Any]:
    """One day (a minute a value) under ``rule``: the cell ``bench.tune`` judges (x over foresight, saturated %,
    direction changes, node-hours). The day starts with the nodes the rule wants for its first minute. ``lag``: the
    rule sees each minute's demand that many minutes late (what an alert's evaluation, ``for`` and grouping add)."""
    def wanted(level: float, busy: bool) -> int:
        spare = rule.spare_day if busy else rule.spare_night
        return max(low, rule.floor_day if busy else 0, math.ceil(level * (1 + rule.fraction) + spare - 1e-9))

    ready = wanted(demand[0], False)
    booting: deque[int] = deque()  # the minutes the nodes asked for are ready, in order
    recent: deque[tuple[int, float]] = deque()  # the window's running maximum (minute, demand), decreasing
    last, changes, saturated, node_minutes, last_in = "", 0, 0, 0, -math.inf
    for t, d in enumerate(demand):
        seen = demand[max(0, t - lag)]
        while recent and recent[-1][1] <= seen:
            recent.pop()
        recent.append((t, seen))
        while recent[0][0] < t - rule.window:
            recent.popleft()
        busy = BUSY_HOURS[0] <= (t % 1440) / 60 < BUSY_HOURS[1]
        have = ready + len(booting)
        up, down = wanted(seen, busy), wanted(recent[0][1], busy)
        if up > have:
            booting.extend([t + boot] * (up - have))
            changes += last == "in"
            last = "out"
        elif have - down >= rule.min_in and t - last_in >= rule.cooldown and ready > 0:
            ready -= min(have - down, rule.max_in, ready)
            changes += last == "out"
            last, last_in = "in", t
        while booting and booting[0] <= t:
            booting.popleft()
            ready += 1
        node_minutes += ready
        saturated += d > ready + 1e-9
    best = sum(max(low, math.ceil(d - 1e-9)) for d in demand)
    return {"x": round(node_minutes / best, 3), "saturated_pct": round(100 * saturated / len(demand), 2),
            "changes": changes, "node_hours": round(node_minutes / 60, 1)}


_WORK: dict[str, Any] = {}


def _init(family: str, boot: int, lag: int, smoke: bool) -> None:
    _WORK.update(fam=FAMILIES[family], boot=boot, lag=lag,
                 days=[d for _, d in unseen(family, FAMILIES[family], smoke)])


def score(rule: Rule) -> tuple[dict[str, Any], list[bool]]:
    """The verdict of one rule on the unseen days, and which days met the goal."""
    fam: Family = _WORK["fam"]
    cells = [replay(d, rule, _WORK["boot"], lag=_WORK["lag"]) for d in _WORK["days"]]
    goal = fam.goal
    met = [c["x"] <= goal.ratio and c["saturated_pct"] <= goal.saturated_pct and c["changes"] <= goal.changes
           for c in cells]
    return verdict(cells, goal, fam.budget), met


def sample(rng: random.Random) -> Rule:
    return Rule(**{key: rng.choice(values) for key, values in GRID.items()})


def mutate(rng: random.Random, rule: Rule) -> Rule:
    """A neighbour: one knob (or two, a third of the time) moved to the next value of its grid."""
    changed = dataclasses.asdict(rule)
    for key in rng.sample(sorted(GRID), 2 if rng.random() < 1 / 3 else 1):
        values = GRID[key]
        i = values.index(changed[key]) + rng.choice((-1, 1))
        changed[key] = values[min(len(values) - 1, max(0, i))]
    return Rule(**changed)


def bound(family: str, boot: int = 5, lag: int = 0, candidates: int = 400, rounds: int = 4, top: int = 8,
          neighbours: int = 8, seed: int = 1, workers: int = 2, smoke: bool = False) -> dict[str, Any]:
    """Search idealised rules on the family's unseen days with nodes ready ``boot`` minutes after asked for, the
    demand seen ``lag`` minutes late."""
    fam = FAMILIES[family]
    rng = random.Random(seed)
    seen: dict[Rule, dict[str, Any]] = {}
    any_day: list[bool] = []
    with multiprocessing.get_context("fork").Pool(workers, _init, (family, boot, lag, smoke)) as executor:
        def run(batch: list[Rule]) -> None:
            fresh = list(dict.fromkeys(r for r in batch if r not in seen))
            for rule, (got, met) in zip(fresh, executor.map(score, fresh)):
                seen[rule] = got
                any_day[:] = [a or m for a, m in zip(any_day or [False] * len(met), met)]

        run([Rule()] + [sample(rng) for _ in range(candidates)])
        for _ in range(rounds):
            best = sorted(seen.items(), key=rank)[:top]
            run([mutate(rng, rule) for rule, _ in best for _ in range(neighbours)])
    ranked = sorted(seen.items(), key=rank)
    return {"family": family, "boot_minutes": boot, "lag_minutes": lag, "seed": seed, "goal": fam.goal.__dict__,
            "budget_pct": fam.budget, "tried": len(seen), "days": len(any_day),
            "any_point_pct": round(100 * sum(any_day) / max(1, len(any_day)), 1),
            "best": [{"verdict": got, "rule": dataclasses.asdict(rule)} for rule, got in ranked[:top]],
            "best_held": [{"verdict": got, "rule": dataclasses.asdict(rule)} for rule, got in ranked
                          if held(got, fam.budget)][:top]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--boot", type=int, default=5, help="minutes from asking for a node to its being ready")
    parser.add_argument("--lag", type=int, default=0, help="minutes late the rule sees the demand (default 0)")
    parser.add_argument("--candidates", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.boot < 0 or args.lag < 0:
        parser.error("--boot and --lag must be 0 or more")
    print(json.dumps(bound(args.family, args.boot, args.lag, args.candidates, args.rounds, seed=args.seed,
                           workers=args.workers), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
