"""The status page against the API's list at many pools (issue 34, item 9): median time of ``GET /`` and of
``GET /api/v1/pools`` (interleaved; wall and CPU time, the CPU time being steadier on a shared machine), and the
store's reads (SELECT statements) each sends.

    python -m bench.status_page [--pools 800] [--runs 5] [--decisions] [--events 100000 [--hours 24]]
                                [--store sqlite|postgresql]

The app in-process on a SQLite file (or a fresh PostgreSQL database, ``BENCH_PG_URL``), simulated pools; every
pool's view stored by one reconciler tick, with ``--events`` that many events of the pools written first (spread
evenly over the last ``--hours``, as one batch: a store's history, then ANALYZE as autovacuum would), and with
``--decisions`` one decision per pool (its last event and a chart). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

from sqlalchemy import event, insert, text

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.store import EventRecord, tables
from autoscaler.store.rows import event_row
from bench.common import fresh_pg_database
from tests.support import AUTH, FakeClock, am_alert, am_payload, config

# what a busy pool's log holds: mostly cooldown skips, some changes, a few shortfalls and failures
_MIX = [("scale_out", "skipped_cooldown", 2, 2)] * 6 + [
    ("scale_out", "scaled", 2, 3), ("scale_in", "scaled", 3, 2), ("scale_out", "no_capacity", 3, 2),
    ("scale_out", "failed", 2, 2)]


def _history(engine: Any, names: list[str], count: int, now: float, hours: float) -> None:
    """``count`` events of the pools in turn, the newest at ``now``, evenly over the last ``hours``, in one batch."""
    step = hours * 3600 / max(count, 1)
    rows = [event_row(EventRecord(time=now - (count - i) * step, pool=names[i % len(names)], source="alertmanager",
                                  action=action, outcome=outcome, from_=a, to=b, reason=f"alert GPUBusy: {outcome}",
                                  alerts=[{"alertname": "GPUBusy", "fingerprint": f"f{i}"}],
                                  details={"value": float(i % 97)}))
            for i, (action, outcome, a, b) in ((i, _MIX[i % len(_MIX)]) for i in range(count))]
    with engine.begin() as conn:
        for start in range(0, len(rows), 10_000):
            conn.execute(insert(tables.events), rows[start:start + 10_000])
        if engine.dialect.name == "postgresql":
            conn.execute(text("ANALYZE"))


def run(pools: int, runs: int, decisions: bool, events: int = 0, hours: float = 24.0,
        store: str = "sqlite") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        specs = [{"name": f"p{i:05d}", "provider": "simulated", "min": 0, "max": 6,
                  "simulated": {"initial_count": 1}} for i in range(pools)]
        groups = [{"name": "g", "pools": [s["name"] for s in specs[:3]]}]
        clock = FakeClock()
        url = fresh_pg_database("bench_status_page") if store == "postgresql" else f"sqlite:///{tmp}/s.db"
        if url is None:
            raise SystemExit("PostgreSQL not available")
        settings = build_settings(config(url, pools=specs, groups=groups, rules=[]), env={})
        app = create_app(settings, clock=clock, startup_check=False)
        client = app.test_client()
        if events:
            _history(app.extensions["autoscaler"].store.engine, [s["name"] for s in specs], events, clock(), hours)
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
                     .upper().startswith(("SELECT", "WITH")) else None)
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
        result = {"pools": pools, "decisions": decisions, "events": events, "hours": hours, "store": store,
                  "runs": runs, "page_s": round(page, 3),
                  "page_range_s": [round(min(times["/"]), 3), round(max(times["/"]), 3)],
                  "api_s": round(api, 3), "api_range_s": [round(min(times["/api/v1/pools"]), 3),
                                                          round(max(times["/api/v1/pools"]), 3)],
                  "ratio": round(page / api, 2), "page_cpu_s": round(statistics.median(cpu["/"]), 3),
                  "api_cpu_s": round(statistics.median(cpu["/api/v1/pools"]), 3),
                  "cpu_ratio": round(statistics.median(cpu["/"]) / statistics.median(cpu["/api/v1/pools"]), 2),
                  "page_reads": counts["/"], "api_reads": counts["/api/v1/pools"],
                  "page_bytes": len(client.get("/", headers=AUTH).get_data())}
        app.extensions["autoscaler"].store.close()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=800)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--decisions", action="store_true")
    parser.add_argument("--events", type=int, default=0, help="events of the pools stored first")
    parser.add_argument("--hours", type=float, default=24.0, help="the events spread over the last this many hours")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    print(json.dumps(run(args.pools, args.runs, args.decisions, args.events, args.hours, args.store)))


if __name__ == "__main__":
    main()
