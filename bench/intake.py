"""Benchmark 1: intake throughput (wrk) and latency at a fixed rate (open-loop client), against a bare Flask app."""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests

from bench.common import (AUTH, POOL, ROOT, TOKEN, fresh_pg_database, loadavg, notification, percentile,
                          service_config, summary, workers_cpu_seconds)
from tests.support.servers import Service

WORKER_CLASSES = {"sync": "--worker-class sync", "gthread": "--worker-class gthread --threads 4"}
HOOK = "/webhook/alertmanager"


def _template(workdir: Path) -> Path:
    """The notification body with placeholders the wrk script fills in per request."""
    body = json.dumps(notification(0))
    body = re.sub(r'"fingerprint": "0{12}', '"fingerprint": "@@FP@@', body)
    body = body.replace("09:00:00.000Z", "09:00:00.@@NS@@Z")
    path = workdir / "body.json"
    path.write_text(body)
    return path


_runs = itertools.count(1)


def wrk(url: str, body_file: Path, seconds: float, connections: int) -> dict[str, Any]:
    """Closed-loop maximum throughput with wrk (1 thread, ``connections`` connections), fresh fingerprints each run."""
    env = {**os.environ, "BENCH_BODY_FILE": str(body_file), "BENCH_TOKEN": TOKEN,
           "BENCH_SEQ_BASE": str(next(_runs) * 1_000_000_000)}
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--timeout", "10s",
                          "-s", str(ROOT / "bench" / "intake.lua"), url + HOOK],
                         capture_output=True, text=True, env=env, timeout=seconds + 60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result:\n{out.stdout}\n{out.stderr}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    data["errors"] = sum(v for k, v in data.items() if k.startswith("errors_"))
    return data


def fixed_rate(url: str, rate: float, seconds: float, seq: int) -> dict[str, Any]:
    """Open-loop latency at ``rate`` req/s from bench/loadgen.py in its own process."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), url + HOOK, "--rate", str(rate),
                          "--duration", str(seconds), "--seq", str(seq)],
                         capture_output=True, text=True, timeout=seconds + 120, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen failed:\n{out.stderr[-2000:]}")
    data = json.loads(out.stdout)
    lat = data.pop("latencies_ms")
    data.update(p50_ms=percentile(lat, 50), p99_ms=percentile(lat, 99), max_ms=max(lat) if lat else None)
    return data


def _prime(service: Service) -> tuple[str, int]:
    """One notification that scales the pool, so every later one meets the cooldown: its outcome and event id."""
    resp = requests.post(service.url + HOOK, json=notification(999_999_999), headers=AUTH, timeout=10)
    resp.raise_for_status()
    decision = resp.json()["decisions"][0]
    return str(decision["outcome"]), int(decision["event_id"])


def _decisions(service: Service) -> dict[str, int]:
    """Decisions so far by outcome, summed over the pool's actions, from the service's own /metrics."""
    text = requests.get(service.url + "/metrics", headers=AUTH, timeout=30).text
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("gpu_autoscaler_decisions_total{"):
            outcome = re.search(r'outcome="([^"]+)"', line)
            if outcome:
                counts[outcome.group(1)] = counts.get(outcome.group(1), 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _outcomes(service: Service, primed_event: int) -> dict[str, int]:
    """Outcomes of the last 500 events after the priming one (to prove the cooldown path was measured): a short smoke
    run under load may answer fewer than 500 measured requests, and the priming scale-out is not one of them."""
    resp = requests.get(service.url + "/api/v1/events", params={"pool": POOL, "limit": "500"}, headers=AUTH, timeout=30)
    resp.raise_for_status()
    counts: dict[str, int] = {}
    for ev in resp.json()["events"]:
        if ev["id"] > primed_event:
            counts[ev["outcome"]] = counts.get(ev["outcome"], 0) + 1
    return counts


def run(smoke: bool = False, runs: int = 5, seconds: float = 10.0, rate: float = 200.0,
        connections: int = 8) -> dict[str, Any]:
    """Every store x worker class: wrk throughput of the app and of the baseline, interleaved; then fixed-rate."""
    if smoke:
        runs, seconds = 1, 1.0
    classes = ["gthread"] if smoke else list(WORKER_CLASSES)
    workdir = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    body = _template(workdir)
    stores = {"sqlite": f"sqlite:///{workdir / 'intake.db'}"}
    if not smoke and fresh_pg_database("bench_intake_probe"):
        stores["postgresql"] = "fresh database per worker class"
    results: dict[str, Any] = {"settings": {"runs": runs, "seconds": seconds, "rate": rate, "wrk_connections":
                                            connections, "gunicorn_workers": 2, "worker_classes": WORKER_CLASSES,
                                            "stores": list(stores)}, "variants": {}}
    seq = 1_000_000
    for wclass in classes:
        env = {"GUNICORN_CMD_ARGS": WORKER_CLASSES[wclass]}
        with ExitStack() as stack:
            targets = {"baseline": stack.enter_context(Service({}, workdir, env=env, app="bench.baseline_app:app"))}
            primed_events: dict[str, int] = {}
            for store, url in stores.items():
                cfg_dir = workdir / f"{wclass}-{store}"
                cfg_dir.mkdir()
                if store == "postgresql":
                    url = fresh_pg_database(f"bench_intake_{wclass}") or ""
                else:
                    url = url.replace("intake.db", f"intake-{wclass}.db")
                svc = stack.enter_context(Service(service_config(url), cfg_dir, env=env))
                outcome, primed_events[store] = _prime(svc)
                results.setdefault("primed", {})[f"{wclass}/{store}"] = outcome
                targets[store] = svc
            rps: dict[str, list[float]] = {name: [] for name in targets}
            raw: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
            loads = []
            if not smoke:  # warm-up, discarded: the first seconds of a fresh store run measurably slower
                for svc in targets.values():
                    wrk(svc.url, body, 5, connections)
            before = {name: _decisions(svc) for name, svc in targets.items() if name != "baseline"}
            for _ in range(runs):
                loads.append(loadavg())
                for name, svc in targets.items():
                    workers = svc.worker_pids()
                    cpu_before = workers_cpu_seconds(workers)
                    res = wrk(svc.url, body, seconds, connections)
                    # The workers' own CPU per request: unlike req/s, it does not move with the other tenants' load.
                    res["cpu_ms_per_request"] = 1000 * (workers_cpu_seconds(workers) - cpu_before) / max(
                        1, res["requests"])
                    rps[name].append(res["rps"])
                    raw[name].append(res)
            for name, svc in targets.items():
                lat = []
                for _ in range(1 if smoke else max(1, runs)):
                    seq += 100_000
                    lat.append(fixed_rate(svc.url, rate, seconds, seq))
                entry = {"rps": summary(rps[name]), "wrk": raw[name],
                         "cpu_ms_per_request": summary([r["cpu_ms_per_request"] for r in raw[name]]),
                         "fixed_rate": {"p50_ms": summary([r["p50_ms"] for r in lat]),
                                        "p99_ms": summary([r["p99_ms"] for r in lat]),
                                        "max_ms": summary([r["max_ms"] for r in lat]),
                                        "statuses": [r["statuses"] for r in lat]},
                         "loadavg_during": loads}
                if name != "baseline":
                    entry["measured_outcomes"] = _delta(_decisions(svc), before[name])  # every wrk and loadgen request
                    entry["ratio"] = summary([a / b for a, b in zip(rps[name], rps["baseline"])])
                    entry["cpu_ratio"] = summary([b["cpu_ms_per_request"] / a["cpu_ms_per_request"]
                                                  for a, b in zip(raw[name], raw["baseline"])])
                    entry["outcomes_last_500"] = _outcomes(svc, primed_events[name])
                results["variants"][f"{wclass}/{name}"] = entry
    return results


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary."""
    rows = ["variant                 req/s (median [min-max])   ratio  cpu ms/req  cpu ratio  p50 ms  p99 ms @ %g/s"
            "  5xx/err" % res["settings"]["rate"]]
    for name, v in res["variants"].items():
        r = v["rps"]
        ratio = f"{v['ratio']['median']:.2f}" if "ratio" in v else "  -  "
        fr = v["fixed_rate"]
        bad = sum(n for st in fr["statuses"] for code, n in st.items() if code == "0" or code.startswith("5"))
        bad += sum(w["errors"] for w in v["wrk"])
        cpu_ratio = f"{v['cpu_ratio']['median']:.2f}" if "cpu_ratio" in v else "  -  "
        rows.append(f"{name:22s}  {r['median']:7.0f} [{r['min']:.0f}-{r['max']:.0f}]      {ratio:>5}  "
                    f"{v['cpu_ms_per_request']['median']:10.3f}  {cpu_ratio:>9}  "
                    f"{fr['p50_ms']['median']:6.1f}  {fr['p99_ms']['median']:6.1f}        {bad}")
    return rows
