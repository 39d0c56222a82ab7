"""Does the choice hold on the weeks after (issue 47 item 1)? Two synthetic histories of 20 days, tuned on the first
7 (``replay --tune`` as documented, 5 days searched, 2 confirmed) with and without the outlook (``--no-outlook``:
the tuner before issue 47), each tuned config replayed on days 8-20, which the tuner never saw:

- ``growing``: the inference family (seed 101), demand x 1.5 over the 20 days (2.0% a day), as the growing
  image-generation service of issue 47;
- ``lone_peak``: the inference family (seed 101) with one 90-minute surge of 10 nodes on day 3 (no other day comes
  near it), and none after.

``python -m bench.outlook [--case growing]``; prints JSON: per case and tuner, the tune's CPU seconds, the outlook
found, the choice's headroom, and the days after: share meeting the inference goal, within the budget, the worst
day, the means.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from typing import Any

from autoscaler.config.load import load_replay_config
from autoscaler.replay.tune_cli import tune
from bench.traces.make_traces import generate
from bench.tune import BASE, FAMILIES, _cpu_seconds, judge_day, verdict, write_trace

DAYS, WEEK = 20, 7
GROWTH = 1.5  # over the 20 days
SPIKE = (2 * 1440 + 14 * 60, 90, 10.0)  # day 3, 14:00, 90 minutes, 10 nodes


def history(case: str) -> list[float]:
    demand = generate("diurnal_inference", days=DAYS, seed=101)
    if case == "growing":
        rate = math.log(GROWTH) / DAYS
        return [round(d * math.exp(rate * i / 1440), 2) for i, d in enumerate(demand)]
    start, length, height = SPIKE
    return [round(d + (height * min(1.0, (i - start + 1) / 5) if start <= i < start + length else 0.0), 2)
            for i, d in enumerate(demand)]


def run(cases: list[str]) -> dict[str, Any]:
    fam = FAMILIES["diurnal_inference"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            demand = history(case)
            path = os.path.join(tmp, f"{case}.csv")
            write_trace(path, demand[:WEEK * 1440])
            after = [demand[d * 1440:(d + 1) * 1440] for d in range(WEEK, DAYS)]
            out[case] = {}
            for name, outlook in (("outlook", True), ("no_outlook", False)):
                cpu = _cpu_seconds()
                data = tune(BASE, path, os.path.join(tmp, case, name), fam.budget, workers=2, quiet=True,
                            outlook=outlook)
                cpu = _cpu_seconds() - cpu
                tuned = load_replay_config(os.path.join(tmp, case, name, "tuned.yaml"))[1]
                cells = [judge_day(tuned, day)["run"] for day in after]
                out[case][name] = {"tune_cpu_s": round(cpu, 1), "outlook": data["outlook"],
                                   "headroom": data["tuned"].get("scale_out.headroom"),
                                   "window": [data["tuned"].get("window.hours"), data["tuned"].get("window.headroom")],
                                   "verdict": verdict(cells, fam.goal, fam.budget),
                                   "days": [[c["x"], c["saturated_pct"], c["changes"]] for c in cells]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", choices=("growing", "lone_peak"), action="append")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.case or ["growing", "lone_peak"]), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
