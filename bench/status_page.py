"""The status page against the API's list at many pools (issue 34, item 9): median time of ``GET /`` and of
``GET /api/v1/pools`` (interleaved; wall and CPU time, the CPU time being steadier on a shared machine), and the
store's reads (SELECT statements) each sends.

    python -m bench.status_page [--pools 800] [--runs 5] [--decisions]

The app in-process on a SQLite file, simulated pools; every pool's view stored by one reconciler tick, and with
``--decisions`` one decision per pool first (its last event and a chart). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

from sqlalchemy import event

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from tests.support import AUTH, FakeClock, am_alert, am_payload, config


def run(pools: int, runs: int, decisions: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        specs = [{"name": f"p{i:05d}", "provider": "simulated", "min": 0, "max": 6,
                  "simulated": {"initial_count": 1}} for i in range(pools)]
        groups = [{"name": "g", "pools": [s["name"] for s in specs[:3]]}]
        clock = FakeClock()
        settings = build_settings(config(f"sqlite:///{tmp}/s.db", pools=specs, groups=groups, rules=[]), env={})
        app = create_app(settings, clock=clock, startup_check=False)
        client = app.test_client()
        if decisions:
            for spec in specs:
                labels = {"autoscaler_pool": spec["name"], "autoscaler_action": "scale_out"}
                client.post("/webhook/alertmanager", headers=AUTH,
                            json=am_payload(am_alert("GPUBusy", fingerprint=spec["name"], **labels)))
        app.extensions["autoscaler_reconciler"].tick(clock())
        engine = app.extensions["autoscaler"].store.engine
        reads: list[str] = []
        event.listen(engine, "before_cursor_execute",
                     lambda _c, _cur, statement, *_a: reads.append(statement) if statement.lstrip()
                     .upper().startswith("SELECT") else None)
        times: dict[str, list[float]] = {"/": [], "/api/v1/pools": []}
        cpu: dict[str, list[float]] = {"/": [], "/api/v1/pools": []}
        counts: dict[str, int] = {}
        for _ in range(runs):
            for path in times:
                reads.clear()
                start, start_cpu = time.perf_counter(), time.process_time()
                resp = client.get(path, headers=AUTH)
                times[path].append(time.perf_counter() - start)
                cpu[path].append(time.process_time() - start_cpu)
                assert resp.status_code == 200, resp.status_code
                counts[path] = len(reads)
        page, api = statistics.median(times["/"]), statistics.median(times["/api/v1/pools"])
        return {"pools": pools, "decisions": decisions, "runs": runs,
                "page_s": round(page, 3), "page_range_s": [round(min(times["/"]), 3), round(max(times["/"]), 3)],
                "api_s": round(api, 3), "api_range_s": [round(min(times["/api/v1/pools"]), 3),
                                                        round(max(times["/api/v1/pools"]), 3)],
                "ratio": round(page / api, 2), "page_cpu_s": round(statistics.median(cpu["/"]), 3),
                "api_cpu_s": round(statistics.median(cpu["/api/v1/pools"]), 3),
                "cpu_ratio": round(statistics.median(cpu["/"]) / statistics.median(cpu["/api/v1/pools"]), 2),
                "page_reads": counts["/"], "api_reads": counts["/api/v1/pools"],
                "page_bytes": len(client.get("/", headers=AUTH).get_data())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=800)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--decisions", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.pools, args.runs, args.decisions)))


if __name__ == "__main__":
    main()
