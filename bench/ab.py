"""Paired A/B of the intake across git revisions: ``python -m bench.ab REV [REV…] [--stores sqlite,postgresql]``.

Each revision is exported (``git archive``) to a temporary directory and served by its own gunicorn (same
worker settings for all, so only the code differs) next to the bare Flask baseline; wrk runs are interleaved
round by round, in a rotating order, and every ratio is taken within a round.
"""
from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import requests

from bench.common import (AUTH, ROOT, fresh_pg_database, loadavg, notification, service_config, summary,
                          workers_cpu_seconds)
from bench.intake import HOOK, _template, wrk
from tests.support.servers import Service


def export(rev: str, dest: Path) -> Path:
    """The tree of ``rev`` unpacked under ``dest``."""
    data = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("revs", nargs="+", help="git revisions, oldest first (each is compared with the one before)")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8, help="wrk's connections per run")
    parser.add_argument("--worker-args", default="--worker-class gthread --threads 4")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    body = _template(workdir)
    servers: dict[str, Service] = {}
    env = {"GUNICORN_CMD_ARGS": args.worker_args}
    try:
        servers["baseline"] = Service({}, workdir, env=env, app="bench.baseline_app:app").start()
        for i, rev in enumerate(args.revs):
            tree = export(rev, workdir / f"tree{i}")
            for store in args.stores.split(","):
                url = (f"sqlite:///{workdir / f'ab{i}.db'}" if store == "sqlite"
                       else fresh_pg_database(f"bench_ab_{i}") or "")
                name = f"{rev}/{store}"
                servers[name] = Service(service_config(url), workdir, env=env, root=tree).start()
                resp = requests.post(servers[name].url + HOOK, json=notification(999_999_999), headers=AUTH,
                                     timeout=10)
                assert resp.json()["decisions"][0]["outcome"] == "scaled", resp.text
        names = list(servers)
        for name in names:  # warm-up, discarded
            wrk(servers[name].url, body, 3, 8)
        rps: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}  # the workers' CPU ms per request, per round
        p99: dict[str, list[float]] = {n: [] for n in names}  # wrk's latency p99 at saturation, ms, per round
        loads = []
        for r in range(args.rounds):
            loads.append(loadavg())
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                workers = servers[name].worker_pids()
                cpu_before = workers_cpu_seconds(workers)
                res = wrk(servers[name].url, body, args.seconds, args.connections)
                if res["errors"]:
                    print(f"warning: {name} had errors: {res}", file=sys.stderr)
                rps[name].append(res["rps"])
                p99[name].append(res["lat_p99_us"] / 1000)
                cpu[name].append(1000 * (workers_cpu_seconds(workers) - cpu_before) / max(1, res["requests"]))
        out: dict[str, Any] = {"loadavg": loads, "settings": vars(args), "variants": {}}
        for name in names:
            entry = {"rps": summary(rps[name]), "cpu_ms_per_request": summary(cpu[name]), "p99_ms": summary(p99[name])}
            if name != "baseline":
                entry["ratio"] = summary([a / b for a, b in zip(rps[name], rps["baseline"])])
                entry["p99_ratio"] = summary([a / b for a, b in zip(p99[name], p99["baseline"])])
                entry["cpu_ratio"] = summary([b / a for a, b in zip(cpu[name], cpu["baseline"])])
            out["variants"][name] = entry
        for store in args.stores.split(","):
            for prev, rev in zip(args.revs, args.revs[1:]):
                a, b = rps[f"{prev}/{store}"], rps[f"{rev}/{store}"]
                out["variants"][f"{rev}/{store}"]["gain_vs_previous"] = summary([y / x for x, y in zip(a, b)])
                ca, cb = cpu[f"{prev}/{store}"], cpu[f"{rev}/{store}"]
                out["variants"][f"{rev}/{store}"]["cpu_gain_vs_previous"] = summary([x / y for x, y in zip(ca, cb)])
        print(json.dumps(out, indent=1))
        print(f"load average per round: {', '.join(f'{x:.2f}' for x in loads)}")
        for name, v in out["variants"].items():
            extra = "".join(f"  {k} {v[k]['median']:.2f} [{v[k]['min']:.2f}-{v[k]['max']:.2f}]"
                            for k in ("ratio", "gain_vs_previous", "cpu_ratio", "cpu_gain_vs_previous", "p99_ratio")
                            if k in v)
            c = v["cpu_ms_per_request"]
            print(f"{name:32s} {v['rps']['median']:7.0f} [{v['rps']['min']:.0f}-{v['rps']['max']:.0f}]"
                  f"  cpu ms/req {c['median']:.3f} [{c['min']:.3f}-{c['max']:.3f}]"
                  f"  p99 ms {v['p99_ms']['median']:.1f}{extra}")
    finally:
        for server in servers.values():
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
