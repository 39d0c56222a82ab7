"""Benchmark 2: an alert storm of identical notifications across 2 instances sharing one store."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select

from autoscaler.store import tables
from bench.common import POOL, ROOT, fresh_pg_database, percentile, service_config, summary
from tests.support.servers import Service

HOOK = "/webhook/alertmanager"


def _count(url: str) -> dict[str, int]:
    """Events per outcome, straight from the store."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(tables.events.c.outcome, func.count()).group_by(tables.events.c.outcome))
            return {str(outcome): int(n) for outcome, n in rows}
    finally:
        engine.dispose()


def _pool_count(url: str) -> int | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(tables.pools.c.tracked_count).where(tables.pools.c.name == POOL)).scalar()
    finally:
        engine.dispose()


def one_run(store_url: str, workdir: Path, total: int, senders: int, burst_size: int, gap: float) -> dict[str, Any]:
    """Two gunicorn instances (2 workers each) on ``store_url``; the storm from a separate process."""
    cfg = service_config(store_url, cooldown="5m")
    env = {"GUNICORN_CMD_ARGS": "--worker-class gthread --threads 4"}
    with ExitStack() as stack:
        instances = []
        for i in range(2):
            d = workdir / f"instance-{i}"
            d.mkdir(parents=True)
            instances.append(stack.enter_context(Service(cfg, d, env=env)))
        urls = ",".join(svc.url + HOOK for svc in instances)
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), urls, "--burst", str(total),
                              "--senders", str(senders), "--burst-size", str(burst_size), "--gap", str(gap)],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
        if out.returncode != 0:
            raise RuntimeError(f"storm client failed:\n{out.stderr[-2000:]}")
    data = json.loads(out.stdout)
    lat = data.pop("latencies_ms")
    outcomes = _count(store_url)
    data.update(p50_ms=percentile(lat, 50), p99_ms=percentile(lat, 99), max_ms=max(lat), outcomes=outcomes,
                events=sum(outcomes.values()), pool_count_after=_pool_count(store_url),
                five_xx=sum(n for code, n in data["statuses"].items() if code.startswith("5") or code == "0"))
    data["ok"] = (outcomes.get("scaled") == 1 and data["five_xx"] == 0 and data["events"] == total
                  and data["pool_count_after"] == 3)
    return data


def run(smoke: bool = False, runs: int = 5) -> dict[str, Any]:
    """The storm on SQLite (one shared file) and, when it answers, PostgreSQL (a fresh database per run)."""
    total, senders, burst_size, gap = (400, 64, 200, 0.1) if smoke else (5000, 64, 500, 0.25)
    runs = 1 if smoke else runs
    workdir = Path(tempfile.mkdtemp(prefix="bench-storm-"))
    results: dict[str, Any] = {"settings": {"notifications": total, "senders": senders, "burst_size": burst_size,
                                            "gap_s": gap, "instances": 2, "workers_per_instance": 2,
                                            "worker_class": "gthread, 4 threads", "runs": runs}, "stores": {}}
    stores = ["sqlite"] if smoke else ["sqlite", "postgresql"]
    for store in stores:
        rows = []
        for r in range(runs):
            if store == "sqlite":
                url: str | None = f"sqlite:///{workdir / f'storm-{r}.db'}"
            else:
                url = fresh_pg_database(f"bench_storm_{r}")
            if url is None:
                break
            rows.append(one_run(url, workdir / f"{store}-{r}", total, senders, burst_size, gap))
        if rows:
            results["stores"][store] = {"runs": rows, "drain_s": summary([x["drain_s"] for x in rows]),
                                        "p99_ms": summary([x["p99_ms"] for x in rows]),
                                        "all_ok": all(x["ok"] for x in rows)}
    return results


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary."""
    s = res["settings"]
    rows = [f"{s['notifications']} identical notifications, {s['senders']} senders, 2 instances x 2 workers",
            "store        drain s (median [min-max])  p99 ms   scaled  5xx  events  all runs ok"]
    for store, v in res["stores"].items():
        d = v["drain_s"]
        last = v["runs"][-1]
        rows.append(f"{store:11s}  {d['median']:6.2f} [{d['min']:.2f}-{d['max']:.2f}]        "
                    f"{v['p99_ms']['median']:6.0f}   {last['outcomes'].get('scaled', 0):5d}  {last['five_xx']:3d}  "
                    f"{last['events']:6d}  {v['all_ok']}")
    return rows
