"""Shared bits of the benchmarks: payloads, configs, statistics, result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POOL = "gpu-a100"
PG_ADMIN = os.environ.get("BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def notification(seq: int, same: bool = False) -> dict[str, Any]:
    """A realistic 3-alert Alertmanager notification for POOL; ``seq`` makes fingerprints and startsAt unique."""
    n = 0 if same else seq
    starts = f"2024-05-02T09:{(n // 60000) % 60:02d}:{(n // 1000) % 60:02d}.{n % 1000:03d}Z"
    alerts = []
    for i, cluster in enumerate(("prod-weu", "prod-neu", "prod-sea")):
        alerts.append({
            "status": "firing",
            "labels": {"alertname": "GPUUtilizationHigh", "autoscaler_action": "scale_out", "autoscaler_pool": POOL,
                       "cluster": cluster, "severity": "info"},
            "annotations": {"summary": f"Average GPU utilisation of pool {POOL} is above 80%",
                            "value": f"{85 + i}.5"},
            "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus-0:9090/graph?g0.expr=avg+by+%28autoscaler_pool%29+%28"
                            "DCGM_FI_DEV_GPU_UTIL%29+%3E+80&g0.tab=1",
            "fingerprint": f"{n:012x}{i:04x}",
        })
    return {"receiver": "gpu-autoscaler", "status": "firing", "alerts": alerts,
            "groupLabels": {"alertname": "GPUUtilizationHigh", "autoscaler_pool": POOL},
            "commonLabels": {"alertname": "GPUUtilizationHigh", "autoscaler_pool": POOL},
            "commonAnnotations": {}, "externalURL": "http://alertmanager.monitoring.svc:9093", "version": "4",
            "groupKey": '{}:{alertname="GPUUtilizationHigh", autoscaler_pool="gpu-a100"}', "truncatedAlerts": 0}


def service_config(store_url: str, cooldown: str = "1h") -> dict[str, Any]:
    """One simulated pool, bearer auth, the given store; a long cooldown keeps it in cooldown after one scale."""
    return {
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "store": {"url": store_url},
        "defaults": {"scale_out": {"step": 1, "cooldown": cooldown},
                     "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"},
                     "dedup_window": "10m"},
        "pools": [{"name": POOL, "provider": "simulated", "min": 1, "max": 10,
                   "simulated": {"initial_count": 2, "provision_seconds": 0}}],
    }


def fresh_pg_database(name: str) -> str | None:
    """Create (or re-create) database ``name`` on the local PostgreSQL; its URL, None when none answers."""
    try:
        from sqlalchemy import create_engine, text

        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
    except Exception as exc:  # noqa: BLE001 - report and skip the PostgreSQL variant
        print(f"PostgreSQL not available ({type(exc).__name__}); skipping its variant", file=sys.stderr)
        return None
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max of repeated runs."""
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "runs": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def workers_cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds used so far by the processes ``pids`` (gunicorn workers; Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a worker that just exited
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def loadavg() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    def version(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "n/a"
    import flask
    import gunicorn
    import sqlalchemy

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "flask": flask.__version__ if hasattr(flask, "__version__") else "n/a",
            "gunicorn": gunicorn.__version__, "sqlalchemy": sqlalchemy.__version__,
            "sqlite": __import__("sqlite3").sqlite_version, "wrk": version(["wrk", "--version"]),
            "postgresql": version(["psql", "--version"]), "prometheus": version(["prometheus", "--version"]),
            "alertmanager": version(["prometheus-alertmanager", "--version"]), "loadavg_at_start": loadavg()}


def write_result(name: str, data: dict[str, Any]) -> Path:
    """bench/results/NAME.json with a timestamp."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                **data}, indent=2, default=str))
    return path


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children now alive (gunicorn master + workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total
