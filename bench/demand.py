"""Measure demand sizing with the replay: node-hours and saturated minutes before/after on bench/traces, and a
surge (2 -> 10 nodes of demand with 8-minute boots): peak requested count and saturated minutes.

python bench/demand.py [--json OUT.json]    (docs/demand.md quotes its output)
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from typing import Any

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autoscaler.config.load import build_settings  # noqa: E402
from autoscaler.replay.report import figures  # noqa: E402
from autoscaler.replay.sim import simulate  # noqa: E402
from autoscaler.replay.trace import Trace, load_trace, parse_time  # noqa: E402

CONFIGS = ("step", "proportional", "demand")
TRACES = ("diurnal_inference", "training_queue")


def _raw(name: str) -> dict[str, Any]:
    with open(os.path.join(ROOT, "bench", "replay", f"{name}.yaml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)  # type: ignore[no-any-return]


def _world(raw: dict[str, Any], boot: float, busy: float) -> dict[str, Any]:
    """The same simulated cloud for every config: nodes boot in ``boot`` s, the cloud reports busy ``busy`` s."""
    out = copy.deepcopy(raw)
    pool = out["pools"][0]
    pool["simulated"] = {**pool["simulated"], "provision_seconds": boot, "busy_seconds": busy}
    if pool.get("scale_out", {}).get("mode") == "demand":
        pool["provision_time"] = boot
    return out


def run(raw: dict[str, Any], trace: Trace) -> dict[str, Any]:
    sim = simulate(build_settings(raw, env={}), trace)
    out = figures(sim)
    out["peak_requested"] = max(m.requested for m in sim.minutes)
    return {k: out[k] for k in ("node_hours", "saturated_minutes", "saturated_pct", "scale_actions",
                                "peak_requested", "peak_ready")}


def foresight(trace: Trace) -> float:
    """Node-hours with perfect foresight: exactly ceil(demand) ready nodes every minute."""
    import math

    return round(sum(math.ceil(d - 1e-9) for d in trace.demand) / 60.0, 2)


def surge() -> Trace:
    """2 nodes of demand for 30 min, 10 for 2 h, then 2 again for 1 h."""
    return Trace(parse_time("2025-01-06T00:00:00Z"), tuple([2.0] * 30 + [10.0] * 120 + [2.0] * 60))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {"traces": {}, "surge": {}}
    for name in TRACES:
        trace = load_trace(os.path.join(ROOT, "bench", "traces", f"{name}.csv"))
        row: dict[str, Any] = {"perfect_foresight_node_hours": foresight(trace)}
        row["as_shipped"] = {c: run(_raw(c), trace) for c in ("step", "proportional")}
        row["same_cloud"] = {c: run(_world(_raw(c), 300, 60), trace) for c in CONFIGS}
        results["traces"][name] = row
    trace = surge()
    for c in CONFIGS:
        raw = _world(_raw(c), 480, 60)
        raw["pools"][0]["simulated"]["initial_count"] = 2
        results["surge"][c] = run(raw, trace)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
