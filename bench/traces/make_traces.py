"""Generate the sample demand traces (seeded, so every run writes the same files).

python bench/traces/make_traces.py  ->  bench/traces/diurnal_inference.csv, training_queue.csv, noisy_plateau.csv
python bench/traces/make_traces.py --family training_queue --days 7 --seed 11 --out week.csv   (any length, any seed)
Demand is in GPU nodes' worth of work, one row a minute. A trace of N days is N days of the family drawn one after
the other from one seeded generator, so the one-day files are the first day of the longer traces of the same seed.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
from datetime import datetime, timedelta, timezone

START = datetime(2025, 1, 6, tzinfo=timezone.utc)
MINUTES = 24 * 60
HERE = os.path.dirname(os.path.abspath(__file__))


def diurnal_inference(rng: random.Random) -> list[float]:
    """An inference service: quiet night, busy day peaking mid-afternoon, noise, and a few traffic bursts."""
    bursts = []
    for _ in range(5):
        start = rng.randint(8 * 60, 21 * 60)
        bursts.append((start, rng.randint(15, 40), rng.uniform(1.5, 3.0)))
    out = []
    level = 0.0
    for minute in range(MINUTES):
        hour = minute / 60
        base = 2.0 + 7.0 * max(0.0, math.sin(math.pi * (hour - 6) / 16)) ** 1.5 if 6 <= hour <= 22 else 2.0
        level = 0.8 * level + rng.gauss(0, 0.15)  # autocorrelated noise
        burst = 0.0
        for start, length, height in bursts:
            if start <= minute < start + length:
                ramp = min(1.0, (minute - start + 1) / 5, (start + length - minute) / 5)
                burst += height * ramp
        out.append(max(0.3, base * (1 + level * 0.5) + burst))
    return out


def training_queue(rng: random.Random) -> list[float]:
    """A shared training cluster: jobs of 1-4 nodes arrive in working-hour waves and run 20 min to 3 h."""
    demand = [0.0] * MINUTES
    for minute in range(MINUTES):
        hour = minute / 60
        rate = 0.05 if 9 <= hour < 19 else 0.015  # jobs per minute
        if rng.random() < rate:
            nodes = rng.choice([1, 1, 2, 2, 3, 4])
            length = rng.randint(20, 180)
            for m in range(minute, min(MINUTES, minute + length)):
                demand[m] += nodes * rng.uniform(0.85, 1.0)  # a job keeps its GPUs busy, not always 100%
    return [max(0.2, d) for d in demand]


def noisy_plateau(rng: random.Random) -> list[float]:
    """A steady service: a level (5-11 nodes, a new one each day) that drifts slowly, fast noise around it, and a
    few spikes of minutes. A pool sized to the level is saturated by the noise; one sized to every spike idles."""
    level = rng.uniform(5.0, 11.0)
    spikes = [(rng.randint(0, MINUTES - 15), rng.randint(3, 15), rng.uniform(1.0, 3.0))
              for _ in range(rng.randint(4, 10))]
    drift = noise = 0.0
    out = []
    for minute in range(MINUTES):
        drift = 0.995 * drift + rng.gauss(0, 0.06)
        noise = 0.6 * noise + rng.gauss(0, 0.35)
        spike = sum(height for start, length, height in spikes if start <= minute < start + length)
        out.append(max(0.3, level * (1 + 0.1 * drift) + noise + spike))
    return out


FAMILIES = {"diurnal_inference": diurnal_inference, "training_queue": training_queue, "noisy_plateau": noisy_plateau}
#: The seeds of the committed one-day files.
SEEDS = {"diurnal_inference": 20250106, "training_queue": 7, "noisy_plateau": 3}


def generate(family: str, days: int = 1, seed: int | None = None) -> list[float]:
    """``days`` days of ``family`` from one generator seeded with ``seed`` (default: the committed file's)."""
    rng = random.Random(SEEDS[family] if seed is None else seed)
    out: list[float] = []
    for _ in range(days):
        out += FAMILIES[family](rng)
    return out


def write(path: str, demand: list[float], start: datetime = START) -> None:
    """One CSV with the header timestamp,demand at ``path`` (relative to the current directory, like any CLI)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("timestamp,demand\n")
        for i, d in enumerate(demand):
            fh.write(f"{(start + timedelta(minutes=i)).strftime('%Y-%m-%dT%H:%M:%SZ')},{d:.2f}\n")
    print(f"{path}: {len(demand)} rows, peak {max(demand):.2f}, mean {sum(demand) / len(demand):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=sorted(FAMILIES), help="one family (default: every committed file)")
    parser.add_argument("--days", type=int, default=1, help="length in days (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="generator seed (default: the committed file's)")
    parser.add_argument("--start", default=START.strftime("%Y-%m-%d"), help="first day, UTC (default 2025-01-06)")
    parser.add_argument("--out", default=None, help="output CSV (default bench/traces/<family>.csv)")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be at least 1")
    if args.out and not args.family:
        parser.error("--out needs --family (one file per family)")
    start = datetime.strptime(args.start, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    for family in [args.family] if args.family else sorted(FAMILIES):
        out = args.out or os.path.join(HERE, f"{family}.csv")
        write(out, generate(family, args.days, args.seed), start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
