"""Tuning on history: tune on a week of each trace family, then replay on days from other seeds.

For each family of bench/traces: generate a week (seeded), run ``replay --tune`` on it (2 processes; the wall time
against the 3-minute limit is the ratio), then replay the base config and the tuned one on days the tuner never saw
(other seeds) beside perfect foresight (ceil(demand) every minute, within the pool's limits):
node-hours, saturated minutes, direction changes. ``python -m bench.run tune``.
"""
from __future__ import annotations

import math
import os
import resource
import statistics
import tempfile
import time
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
START = parse_time("2025-01-06T00:00:00Z")
# family: (seed of the week tuned on, seeds of the days it is tried on)
FAMILIES = {"diurnal_inference": (101, (202, 203, 204, 205, 206)), "training_queue": (11, (22, 23, 24, 25, 26))}
LIMIT_S = 180.0
BUDGET = 1.0  # --max-saturated, %


def write_trace(path: str, demand: list[float]) -> None:
    """A trace CSV from START, one row a minute (the same rounding as make_traces.py)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("timestamp,demand\n")
        for i, d in enumerate(demand):
            stamp = datetime.fromtimestamp(START + 60 * i, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            fh.write(f"{stamp},{d:.2f}\n")


def foresight(demand: list[float], low: int, high: int) -> dict[str, Any]:
    """Perfect foresight: ready = ceil(demand) within [min, max] every minute, provisioning time ignored."""
    ready = [min(high, max(low, math.ceil(d - 1e-9))) for d in demand]
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


def run(smoke: bool = False, runs: int = 5) -> dict[str, Any]:
    """Tune each family once (a week; smoke: a day, few candidates) and replay its test days."""
    out: dict[str, Any] = {"limit_s": LIMIT_S, "max_saturated_pct": BUDGET, "families": {}}
    settings = load_config(BASE)
    spec = settings.pools[replay_pool(settings)]
    with tempfile.TemporaryDirectory() as tmp:
        for family, (week_seed, day_seeds) in FAMILIES.items():
            days = 2 if smoke else 7  # smoke: two days, so that halving still has a shorter rung
            week = [round(d, 2) for d in generate(family, days=days, seed=week_seed)]
            path = os.path.join(tmp, f"{family}-week.csv")
            write_trace(path, week)
            load = os.getloadavg()[0]
            cpu = _cpu_seconds()
            data = tune(BASE, path, os.path.join(tmp, family), BUDGET, candidates=27 if smoke else 405,
                        neighbours=6 if smoke else 60, workers=2, quiet=True)
            cpu = _cpu_seconds() - cpu
            tuned = os.path.join(tmp, family, "tuned.yaml")
            test_days = []
            for seed in day_seeds[:1] if smoke else day_seeds:
                day = generate(family, days=1, seed=seed)
                test_days.append({"seed": seed, "base": replay_day(BASE, day), "tuned": replay_day(tuned, day),
                                  "foresight": foresight([round(d, 2) for d in day], spec.min, spec.max)})
            train = data["spans"]["tune"]["minutes"][1]
            naive = (data["sampled"] + (6 if smoke else 60)) * train  # every candidate on the whole span
            out["families"][family] = {
                "store_s": store_cost(week, 1 if smoke else 3),
                "search_minutes_replayed": data["search_minutes_replayed"], "naive_minutes": naive,
                "search_ratio_to_naive": round(data["search_minutes_replayed"] / naive, 3),
                "week_seed": week_seed, "days": days, "tune_s": data["seconds"], "replays": data["replays"],
                "tune_cpu_s": round(cpu, 1), "tune_cpu_s_per_core": round(cpu / 2, 1),
                "loadavg_before": round(load, 2),
                "candidates_scored_in_full": data["candidates"], "ratio_to_limit": round(data["seconds"] / LIMIT_S, 3),
                "spans": data["spans"], "tuned": data["tuned"], "test_days": test_days,
                "mean": {name: {k: round(sum(d[name][k] for d in test_days) / len(test_days), 3)
                                for k in ("node_hours", "saturated_minutes", "direction_changes", "minutes")}
                         for name in ("base", "tuned", "foresight")}}
    return out


def _cell(s: dict[str, Any]) -> str:
    pct = 100.0 * s["saturated_minutes"] / max(1, s["minutes"])
    return f"{s['node_hours']:7.1f} {s['saturated_minutes']:4d} ({pct:4.2f}%) {s['direction_changes']:3d}"


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary."""
    rows = []
    for family, f in res["families"].items():
        rows.append(f"{family}: tuned {f['days']} day(s) in {f['tune_s']:.1f}s (ratio to {res['limit_s']:.0f}s limit "
                    f"{f['ratio_to_limit']:.2f}; load {f['loadavg_before']:.1f} before), {f['tune_cpu_s']:.0f} CPU-s "
                    f"({f['tune_cpu_s_per_core']:.0f}s a core), {f['replays']} replays")
        st = f["store_s"]
        rows.append(f"  one replay of the trace: SQLite {st['sqlite']:.2f}s, memory {st['memory']:.2f}s (ratio "
                    f"{st['ratio']:.2f}); search replayed {f['search_minutes_replayed']:,} minutes, "
                    f"{f['search_ratio_to_naive']:.2f} of every candidate in full ({f['naive_minutes']:,})")
        rows.append("  test day (seed)   run        node-h  sat min (%)  dir.changes   vs foresight")
        for day in f["test_days"]:
            best = day["foresight"]["node_hours"]
            for name in ("base", "tuned", "foresight"):
                s = day[name]
                rows.append(f"  {day['seed']:<16d}  {name:9s} {_cell(s)}   {s['node_hours'] / best:5.2f}x")
        for name in ("base", "tuned", "foresight"):
            s = f["mean"][name]
            rows.append(f"  {'mean':16s}  {name:9s} {s['node_hours']:7.1f} {s['saturated_minutes']:4.1f} "
                        f"({100 * s['saturated_minutes'] / 1440:4.2f}%) {s['direction_changes']:5.1f}   "
                        f"{s['node_hours'] / f['mean']['foresight']['node_hours']:5.2f}x")
    return rows
