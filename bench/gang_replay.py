"""The gang replay's figures (issue 48 item 6): a day of all-or-nothing training requests through the service's own
code (``python -m autoscaler replay --gang``), atomic against plain scale-outs, on an H100 group whose spot pool
delivers at most 6 nodes (none from 09:00 to 13:00: a stockout) and whose on-demand pool delivers any size.

Requests: a seeded day from 00:30, 2, 4 or 8 nodes, running 30 min to 2.5 h: one every 3 h (never two at once), or
with ``--every 40m`` one every 40 min on average (they overlap on the pools).
Spot boots in 3 min, on-demand in 5 min; provision_time 10 min on both; the reconciler ticks every 30 s.

``python -m bench.gang_replay [--seed 1] [--every 40m] [--json]``
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config.durations import parse_duration, rfc3339
from autoscaler.replay.gang import run_gang_replay

DAY = "2026-01-05"
START = 1767571200.0  # 2026-01-05T00:00:00Z


def config() -> dict[str, Any]:
    def pool(name: str, boot: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "provider": "simulated", "min": 0, "max": 24, "node_selector": f"pool={name}",
                "gpus_per_node": 8, "provision_time": "10m",
                "simulated": {"initial_count": 0, "provision_seconds": boot, "busy_seconds": 0, **more}}
    spot = pool("h100-spot", "3m", capacity=[{"start": f"{DAY}T00:00:00Z", "end": f"{DAY}T09:00:00Z", "nodes": 6},
                                               {"start": f"{DAY}T09:00:00Z", "end": f"{DAY}T13:00:00Z", "nodes": 0},
                                               {"start": f"{DAY}T13:00:00Z", "end": "2026-01-12T00:00:00Z",
                                                "nodes": 6}])
    return {"server": {"reconcile_interval": "30s"}, "store": {"url": "sqlite://"}, "rules": [],
            "defaults": {"scale_out": {"step": 1, "cooldown": 0}, "scale_in": {"step": 1, "cooldown": 0}},
            "pools": [spot, pool("h100-ondemand", "5m")],
            "groups": [{"name": "h100", "pools": ["h100-spot", "h100-ondemand"]}]}


def trace(seed: int, every: float = 0.0) -> list[str]:
    """A day of requests: one every 3 h from 00:30 (never two at once), or, with ``every`` (seconds), one every
    ``every`` on average (exponential gaps: requests overlap on the pools)."""
    rnd = random.Random(seed)
    rows, t = [], START
    while True:
        t += (rnd.expovariate(1 / every) if every else 3 * 3600) if rows else 1800
        if t >= START + 86400:
            return rows
        rows.append(f"{rfc3339(round(t)).replace('.000Z', 'Z')},{rnd.choice((2, 4, 8))},{rnd.randint(30, 150)}m")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--every", default="", help="mean gap between requests, e.g. 40m (default: one every 3 h, "
                                                    "never two at once)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg, path = Path(tmp) / "gang.yaml", Path(tmp) / "gangs.csv"
        cfg.write_text(yaml.safe_dump(config()))
        rows = trace(args.seed, parse_duration(args.every) if args.every else 0.0)
        path.write_text("time,nodes,duration\n" + "\n".join(rows) + "\n")
        started = time.monotonic()
        data = run_gang_replay(str(cfg), str(path), str(Path(tmp) / "out"))
        took = time.monotonic() - started
    if args.json:
        print(json.dumps({**data, "seconds": round(took, 2)}, indent=2))
        return
    print(f"{len(rows)} requests replayed twice in {took:.1f}s")
    for mode in ("atomic", "plain"):
        f = data[mode]
        print(f"{mode:7s} billed while waiting {f['waiting_node_hours']:.2f} node-h "
              f"({f['waiting_node_hours_past_provision_time']:.2f}"
              f" past provision_time), node-h {f['node_hours']:.2f}, started {f['started']}/{f['requests']}, start "
              f"delay mean {f['mean_start_delay_seconds']}s max {f['max_start_delay_seconds']}s, {f['outcomes']}")


if __name__ == "__main__":
    main()
