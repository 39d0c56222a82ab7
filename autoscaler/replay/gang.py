"""``python -m autoscaler replay --gang --config FILE --trace GANGS.csv --out DIR`` (docs/gang.md): the gang trace
replayed atomic and plain (``gang_sim.py``); DIR receives ``summary.json`` and ``requests.csv``."""
from __future__ import annotations

import csv
import json
import os
import time
from collections import Counter
from typing import Any

from autoscaler.config.durations import rfc3339
from autoscaler.config.load import load_replay_config
from autoscaler.replay import command
from autoscaler.replay.gang_sim import GangRun, route, simulate_gangs
from autoscaler.replay.gang_trace import load_gangs

REQUESTS_HEADER = ["mode", "line", "time", "nodes", "started", "start_delay_s", "waiting_node_h",
                   "waiting_past_provision_time_node_h"]


def figures(run: GangRun) -> dict[str, Any]:
    """One run's figures: node-hours of ready nodes, those waiting for the rest of their gang (and past
    provision_time), requests started and how long after they came."""
    started = [j for j in run.jobs if j.started is not None]
    delays = [j.started - j.row.time for j in started if j.started is not None]
    return {"node_hours": round(run.node_seconds / 3600, 4),
            "waiting_node_hours": round(sum(j.waiting for j in run.jobs) / 3600, 4),
            "waiting_node_hours_past_provision_time": round(sum(j.past for j in run.jobs) / 3600, 4),
            "requests": len(run.jobs), "started": len(started),
            "mean_start_delay_seconds": round(sum(delays) / len(delays), 1) if delays else None,
            "max_start_delay_seconds": round(max(delays), 1) if delays else None,
            "outcomes": dict(sorted(Counter(d.outcome.value for _, d in run.decisions).items())),
            "reconcile_ticks": run.ticks}


def run_gang_replay(config_path: str, trace_path: str, out_dir: str) -> dict[str, Any]:
    """Replay a gang trace both ways and write the outputs; ConfigError or ReplayError when an input is bad."""
    _, settings = load_replay_config(config_path)
    group = route(settings)[0]
    rows = load_gangs(trace_path)
    runs = [simulate_gangs(settings, rows, mode) for mode in ("atomic", "plain")]
    data: dict[str, Any] = {"group": group, **{run.mode: figures(run) for run in runs}}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(out_dir, "requests.csv"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(REQUESTS_HEADER)
        for run in runs:
            for j in run.jobs:
                writer.writerow([run.mode, j.row.line, rfc3339(j.row.time), j.nodes,
                                 rfc3339(j.started) if j.started is not None else "",
                                 f"{j.started - j.row.time:.0f}" if j.started is not None else "",
                                 f"{j.waiting / 3600:.4f}", f"{j.past / 3600:.4f}"])
    return data


def gang_replay(config_path: str, trace_path: str, out_dir: str) -> int:
    """The CLI: exit 0 with a one-line result, or 1 with each problem on its own line."""
    started = time.monotonic()
    data = command(lambda: run_gang_replay(config_path, trace_path, out_dir), config_path, out_dir)
    if data is None:
        return 1
    a, p = data["atomic"], data["plain"]
    print(f"replayed {a['requests']} gang request(s) in {time.monotonic() - started:.1f}s -> {out_dir}: billed "
          f"while waiting for the rest of a gang {a['waiting_node_hours']:.2f} node-h, "
          f"{a['waiting_node_hours_past_provision_time']:.2f} past provision_time (plain scale-out "
          f"{p['waiting_node_hours']:.2f}, {p['waiting_node_hours_past_provision_time']:.2f}); node-h "
          f"{a['node_hours']:.1f} (plain {p['node_hours']:.1f}); mean start delay {a['mean_start_delay_seconds']}s "
          f"(plain {p['mean_start_delay_seconds']}s)")
    return 0
