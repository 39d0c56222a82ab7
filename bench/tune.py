"""Tuning on history: tune on a week of each trace family, then replay on days from other seeds.

For each family of bench/traces: generate a week (seeded), run ``replay --tune`` on it with each choice rule
(the default: the span's total within the budget less the margin and each day within the budget; ``--robust``:
every day within the budget less the margin) with 2 processes (the wall time against the 3-minute limit is the
ratio), then replay the base config and each tuned one on five days the tuner never saw (other seeds) beside perfect
foresight (ceil(demand) every minute, never below the pool's min): node-hours, saturated minutes, direction
changes. ``python -m bench.run tune``; ``python -m bench.tune --config tuned.yaml --family F`` replays any config
(another tuner's choice) on the same unseen days.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from autoscaler.config import load_config
from autoscaler.replay.report import figures
from autoscaler.replay.sim import replay_pool, simulate
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.tune_cli import tune
from autoscaler.store.memory import MemoryStore
from bench.traces.make_traces import generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "bench", "replay", "proportional.yaml")
DEMAND = os.path.join(ROOT, "bench", "replay", "demand.yaml")
START = parse_time("2025-01-06T00:00:00Z")


@dataclass(frozen=True)
class Family:
    """How one trace family is tuned and tried: the base config, the budget, the seeds."""

    base: str
    budget: float  # --max-saturated, %
    week_seed: int  # the week tuned on
    day_seeds: tuple[int, ...]  # the days it is tried on (never seen by the tuner)
    max_changes: float | None = None  # --max-direction-changes


FAMILIES = {
    "diurnal_inference": Family(BASE, 1.0, 101, (202, 203, 204, 205, 206)),
    "training_queue": Family(DEMAND, 3.0, 11, (22, 23, 24, 25, 26)),  # pending GPUs: step or demand, headroom
    "noisy_plateau": Family(BASE, 3.0, 31, (32, 33, 34, 35, 36), max_changes=2),  # the goal: <= 2 changes a day
}
RULES = {"default": False, "robust": True}  # the tuner's choice rules compared
LIMIT_S = 180.0


def write_trace(path: str, demand: list[float]) -> None:
    """A trace CSV from START, one row a minute (the same rounding as make_traces.py)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("timestamp,demand\n")
        for i, d in enumerate(demand):
            stamp = datetime.fromtimestamp(START + 60 * i, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            fh.write(f"{stamp},{d:.2f}\n")


def foresight(demand: list[float], low: int) -> dict[str, Any]:
    """Perfect foresight: ready = ceil(demand), never below min, every minute, provisioning time ignored (as
    summary.json's ``foresight_node_hours``)."""
    ready = [max(low, math.ceil(d - 1e-9)) for d in demand]
    moves = [b - a for a, b in zip(ready, ready[1:]) if b != a]
    changes = sum(1 for a, b in zip(moves, moves[1:]) if (a > 0) != (b > 0))
    saturated = sum(1 for d, r in zip(demand, ready) if d > r + 1e-9)
    return {"node_hours": round(sum(ready) / 60.0, 2), "saturated_minutes": saturated, "direction_changes": changes,
            "minutes": len(demand)}


def replay_day(config: str, demand: list[float]) -> dict[str, Any]:
    """One day replayed the way ``replay --config`` does (SQLite store)."""
    data = figures(simulate(load_config(config), Trace(START, tuple(round(d, 2) for d in demand))))
    return {k: data[k] for k in ("node_hours", "saturated_minutes", "direction_changes", "minutes")}


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its finished children (the tuner's worker processes)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def store_cost(demand: list[float], runs: int) -> dict[str, Any]:
    """Seconds (median) of one replay of ``demand`` with the base config on SQLite and on MemoryStore, one core."""
    settings, trace = load_config(BASE), Trace(START, tuple(demand))
    out: dict[str, Any] = {}
    for name, make in (("sqlite", lambda: None), ("memory", MemoryStore)):
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            simulate(settings, trace, store=make())
            times.append(time.perf_counter() - began)
        out[name] = round(statistics.median(times), 3)
    out["ratio"] = round(out["memory"] / out["sqlite"], 3)
    return out


def try_days(config: str, family: str, seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    """``config`` replayed on one day of ``family`` per seed, beside perfect foresight."""
    low = load_config(config).pools[replay_pool(load_config(config))].min
    out = []
    for seed in seeds:
        day = [round(d, 2) for d in generate(family, days=1, seed=seed)]
        out.append({"seed": seed, "run": replay_day(config, day), "foresight": foresight(day, low)})
    return out


def _mean(days: list[dict[str, Any]], name: str) -> dict[str, float]:
    return {k: round(sum(d[name][k] for d in days) / len(days), 3)
            for k in ("node_hours", "saturated_minutes", "direction_changes", "minutes")}


def run(smoke: bool = False, runs: int = 5) -> dict[str, Any]:
    """Tune each family once per choice rule (a week; smoke: two days, few candidates) and replay its test days."""
    out: dict[str, Any] = {"limit_s": LIMIT_S, "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for family, fam in FAMILIES.items():
            days = 2 if smoke else 7  # smoke: two days, so that halving still has a shorter rung
            week = [round(d, 2) for d in generate(family, days=days, seed=fam.week_seed)]
            path = os.path.join(tmp, f"{family}-week.csv")
            write_trace(path, week)
            seeds = fam.day_seeds[:1] if smoke else fam.day_seeds
            entry: dict[str, Any] = {"base_config": os.path.relpath(fam.base, ROOT), "budget_pct": fam.budget,
                                     "max_direction_changes": fam.max_changes,
                                     "week_seed": fam.week_seed, "days": days,
                                     "store_s": store_cost(week, 1), "base": try_days(fam.base, family, seeds),
                                     "rules": {}}
            for rule, robust in RULES.items():
                load = os.getloadavg()[0]
                cpu = _cpu_seconds()
                data = tune(fam.base, path, os.path.join(tmp, family, rule), fam.budget,
                            candidates=27 if smoke else 405, neighbours=6 if smoke else 60, workers=2, quiet=True,
                            robust=robust, max_changes=fam.max_changes)
                cpu = _cpu_seconds() - cpu
                tried = try_days(os.path.join(tmp, family, rule, "tuned.yaml"), family, seeds)
                train = data["spans"]["tune"]["minutes"][1]
                naive = (data["sampled"] + (6 if smoke else 60)) * train  # every candidate on the whole span
                entry["rules"][rule] = {
                    "search_minutes_replayed": data["search_minutes_replayed"], "naive_minutes": naive,
                    "search_ratio_to_naive": round(data["search_minutes_replayed"] / naive, 3),
                    "tune_s": data["seconds"], "replays": data["replays"], "tune_cpu_s": round(cpu, 1),
                    "tune_cpu_s_per_core": round(cpu / 2, 1), "loadavg_before": round(load, 2),
                    "candidates_scored_in_full": data["candidates"], "choice": data["choice"],
                    "ratio_to_limit": round(data["seconds"] / LIMIT_S, 3), "spans": data["spans"],
                    "tuned": data["tuned"], "test_days": tried, "mean": _mean(tried, "run")}
            entry["foresight_mean"] = _mean(entry["base"], "foresight")
            entry["base_mean"] = _mean(entry["base"], "run")
            out["families"][family] = entry
    return out


def _cell(s: dict[str, Any], best: float) -> str:
    pct = 100.0 * s["saturated_minutes"] / max(1, s["minutes"])
    return (f"{s['node_hours']:7.1f} {s['node_hours'] / best:5.2f}x {s['saturated_minutes']:6.1f} ({pct:4.2f}%) "
            f"{s['direction_changes']:5.1f}")


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary: per family, the tuning times, then each unseen day and the mean."""
    rows = []
    for family, f in res["families"].items():
        st = f["store_s"]
        rows.append(f"{family} (base {f['base_config']}, budget {f['budget_pct']:g}% = "
                    f"{int(f['budget_pct'] / 100 * 1440 + 1e-9)} min a day): one replay of the week: SQLite "
                    f"{st['sqlite']:.2f}s, memory {st['memory']:.2f}s")
        for rule, r in f["rules"].items():
            rows.append(f"  {rule}: tuned {f['days']} day(s) in {r['tune_s']:.1f}s (ratio to {res['limit_s']:.0f}s "
                        f"{r['ratio_to_limit']:.2f}; load {r['loadavg_before']:.1f} before), {r['tune_cpu_s']:.0f} "
                        f"CPU-s, {r['replays']} replays, choice {r['choice']}, searched "
                        f"{r['search_ratio_to_naive']:.2f} of every candidate in full")
        rows.append("  day (seed)  run          node-h  x fore  sat min (%)     dir.changes")
        names = ["base", *f["rules"]]
        for i, day in enumerate(f["base"]):
            best = day["foresight"]["node_hours"]
            for name in names:
                s = day["run"] if name == "base" else f["rules"][name]["test_days"][i]["run"]
                rows.append(f"  {day['seed']:<10d}  {name:10s} {_cell(s, best)}")
        best = f["foresight_mean"]["node_hours"]
        for name in names:
            s = f["base_mean"] if name == "base" else f["rules"][name]["mean"]
            rows.append(f"  {'mean':10s}  {name:10s} {_cell(s, best)}")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Replay one config on a family's unseen days (e.g. another tuner's tuned.yaml); prints JSON."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    args = parser.parse_args(argv)
    days = try_days(args.config, args.family, FAMILIES[args.family].day_seeds)
    print(json.dumps({"days": days, "mean": _mean(days, "run"), "foresight_mean": _mean(days, "foresight")},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
