"""The held-out kinds of issue 47, as synthetic shapes (NOT production data): judged as ``bench.real_weeks`` judges a
real trace, for the kinds no public trace reachable here holds (docs/tuning.md, "Real weeks": the LLM serving and
single-team job-queue traces are Git LFS pointers in their repositories' snapshots).

Each shape is drawn by a seeded generator at the size and shape issue 47 names, tuned with ``replay --tune`` on its
first 7 days (bench.real_weeks' base configs, budgets and boot) and judged on every day after, beside
cluster-autoscaler with and without one node of pause pods and ``bench.bound``'s idealised reactive scaler:

- ``llm_daily``: LLM serving with a clear daily cycle (+-40%), 12 nodes' worth, weekends at 0.8x, drift and bursts.
- ``llm_weak``: LLM serving with a weak daily cycle (+-8%), API-heavy: 12 nodes' worth, slow drifts (AR(1)) and
  short bursts, and **one** two-hour surge to 1.9x on day 4 (in the tuning week; none after). Issue 47: the
  tuner before the outlook bought headroom for such a peak all the following weeks.
- ``image_growing``: image-generation serving with a clear daily cycle (+-30%) growing 1.5x over its 20 days.
  Issue 47: the tuner broke its budget there and flapped (15.5 direction changes a day).
- ``team_queue``: one team's training queue in whole 8-GPU jobs (1, 2 or 4 nodes: 70 / 20 / 10%), arriving as a
  Poisson process (1 an hour in weekday working hours 09-19 UTC, 0.25 at night, 0.2 at weekends), each running a
  lognormal time (median 4 hours, sigma 1, at most 48), 19 days.

``python -m bench.shapes [--only NAME] [--seeds 1-3] [--no-outlook] [--json OUT.json]``: one table row per shape and
seed, as ``bench.real_weeks`` prints.
"""
from __future__ import annotations

import argparse
import math
import random
from typing import Any, Callable

from bench import real_weeks
from bench.real_weeks import RealTrace, measure, said, table
from bench.traces import convert

DAY = 1440
GPUS_PER_NODE = real_weeks.GPUS_PER_NODE


def team_queue(seed: int, days: int = 19) -> list[float]:
    """GPUs asked for a minute by one team's queue of whole-node jobs."""
    rng = random.Random(seed)
    gpus = [0.0] * (days * DAY)
    t = 0.0
    while True:
        day, hour = int(t // DAY), (t % DAY) / 60
        rate = (1.0 if 9 <= hour < 19 else 0.25) if day % 7 < 5 else 0.2  # jobs an hour; day 0 is a Monday
        t += rng.expovariate(rate) * 60
        if t >= days * DAY:
            return gpus
        nodes = rng.choices((1, 2, 4), (0.7, 0.2, 0.1))[0]
        minutes = min(48 * 60, rng.lognormvariate(math.log(240), 1.0))
        for m in range(int(t), min(days * DAY, int(t + minutes))):
            gpus[m] += GPUS_PER_NODE * nodes


PEAK_DAY = 3  # the lone surge's day (0-based: the fourth day, inside the five days the tuner searches)


def _llm(seed: int, days: int, amplitude: float, weekend: float = 1.0, surge: bool = False) -> list[float]:
    """GPUs busy a minute serving LLM requests, 12 nodes' worth: a daily cycle of +-``amplitude``, weekends at
    ``weekend`` times, drift (AR(1)) and short bursts; ``surge``: one two-hour surge to 1.9x on PEAK_DAY."""
    rng = random.Random(seed)
    out, drift = [], 0.0
    for m in range(days * DAY):
        hour = (m % DAY) / 60
        cycle = 1 + amplitude * math.sin(2 * math.pi * (hour - 9) / 24)
        quiet = weekend if (m // DAY) % 7 >= 5 else 1.0
        drift = 0.97 * drift + rng.gauss(0, 0.02)
        burst = 0.3 * rng.random() if rng.random() < 0.01 else 0.0
        gpus = 12 * GPUS_PER_NODE * cycle * quiet * (1 + drift + burst)
        if surge and m // DAY == PEAK_DAY and 14 * 60 <= m % DAY < 16 * 60:
            gpus *= 1.9
        out.append(max(0.0, gpus))
    return out


def llm_weak(seed: int, days: int = 14) -> list[float]:
    """LLM serving with a weak daily cycle (+-8%) and one lone surge."""
    return _llm(seed, days, 0.08, surge=True)


def llm_daily(seed: int, days: int = 14) -> list[float]:
    """LLM chat serving with a clear daily cycle (+-40%) and quieter weekends (0.8x)."""
    return _llm(seed, days, 0.4, weekend=0.8)


def image_growing(seed: int, days: int = 20) -> list[float]:
    """GPUs busy a minute serving image generation: a daily cycle, growing 1.5x over the days."""
    rng = random.Random(seed)
    out, drift = [], 0.0
    for m in range(days * DAY):
        hour = (m % DAY) / 60
        growth = 1.5 ** (m / (days * DAY))
        cycle = 1 + 0.3 * math.sin(2 * math.pi * (hour - 8) / 24)
        drift = 0.95 * drift + rng.gauss(0, 0.03)
        out.append(max(0.0, 5 * GPUS_PER_NODE * growth * cycle * (1 + drift) + rng.gauss(0, 2)))
    return out


SHAPES: dict[str, tuple[Callable[[int, int], list[float]], str, int, str]] = {
    "llm_daily": (llm_daily, "serving", 14, "LLM serving, clear daily cycle, quieter weekends (synthetic)"),
    "llm_weak": (llm_weak, "serving", 14, "LLM serving, weak daily cycle, one lone surge in week 1 (synthetic)"),
    "image_growing": (image_growing, "serving", 20, "image generation, daily cycle, growing 1.5x (synthetic)"),
    "team_queue": (team_queue, "training", 19, "one team's queue of whole 8-GPU jobs (synthetic)"),
}


def shape_trace(name: str, seed: int) -> RealTrace:
    """The shape as bench.real_weeks' trace: its GPUs drawn once, whatever path and start it is given."""
    draw, kind, days, title = SHAPES[name]
    gpus = draw(seed, days)
    return RealTrace(f"{name}-{seed}", f"{title}, seed {seed}", kind, "", convert.EPOCH, days,
                     lambda _path, _start, minutes: gpus[:minutes], f"bench/shapes.py {name}, seed {seed}")


def seeds(text: str) -> list[int]:
    """``1-3`` or ``1,4``."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-", 1))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(SHAPES))
    parser.add_argument("--seeds", default="1-3", type=seeds, help="the generators' seeds (default 1-3)")
    parser.add_argument("--no-outlook", action="store_true", help="tune with replay --tune --no-outlook")
    parser.add_argument("--smoke", action="store_true", help="9 days, few candidates: checks the harness")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for name in sorted(SHAPES):
        if args.only and name not in args.only:
            continue
        for seed in args.seeds:
            trace = shape_trace(name, seed)
            results[trace.name] = measure(trace, "", smoke=args.smoke, outlook=not args.no_outlook)
            said(trace.name, results[trace.name])
    table(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
