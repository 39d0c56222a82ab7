"""Benchmark 4: start-up to first answer, RSS per worker, and import time with and without the cloud SDKs."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from bench.common import ROOT, notification, service_config, summary
from bench.intake import _template, wrk
from tests.support.servers import Service

IMPORTS = {
    "interpreter only": "pass",
    "flask (the baseline app)": "import flask",
    "the service (autoscaler.app, providers)": "import autoscaler.app, providers.aks, providers.ack, providers.webhook",
    "the service + both cloud SDKs (a pool on aks and one on ack)":
        "import autoscaler.app, providers.aks, providers.ack, providers.webhook, azure.identity, "
        "azure.mgmt.containerservice, alibabacloud_cs20151215.client, alibabacloud_credentials.client",
    "Azure SDK (azure.identity + azure-mgmt-containerservice)":
        "import azure.identity, azure.mgmt.containerservice",
    "Alibaba Cloud SDK (alibabacloud_cs20151215 + credentials)":
        "import alibabacloud_cs20151215.client, alibabacloud_credentials.client",
}
SDK_CHECK = ("import sys, autoscaler.app, providers.aks, providers.ack; "
             "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('azure', 'alibabacloud'))}))")


def import_seconds(code: str) -> float:
    """Wall time of a fresh interpreter running ``code``."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - began


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_and_measure(svc: Service, body: Path, warm_seconds: int) -> dict[str, Any]:
    """Seconds from spawn to the first /healthz 200 and to a first webhook answer; RSS cold and after load."""
    began = time.perf_counter()
    svc.spawn()
    assert svc.proc is not None
    first = None
    deadline = began + 60
    while first is None and time.perf_counter() < deadline:
        try:
            if requests.get(svc.url + "/healthz", timeout=1).status_code == 200:
                first = time.perf_counter() - began
        except requests.RequestException:
            time.sleep(0.01)
    if first is None:
        raise RuntimeError(f"no answer within 60s:\n{svc.tail(2000)}")
    resp = requests.post(svc.url + "/webhook/alertmanager", json=notification(7), timeout=10,
                         headers={"Authorization": "Bearer bench-token"})
    hook = time.perf_counter() - began
    time.sleep(0.5)  # both workers booted
    cold = [_rss_kib(p) for p in svc.worker_pids()]
    wrk(svc.url, body, warm_seconds, 8)
    warm = [_rss_kib(p) for p in svc.worker_pids()]
    return {"first_answer_s": first, "first_webhook_s": hook, "webhook_status": resp.status_code,
            "master_rss_mib": _rss_kib(svc.proc.pid) / 1024, "worker_rss_cold_mib": [x / 1024 for x in cold],
            "worker_rss_warm_mib": [x / 1024 for x in warm]}


def run(smoke: bool = False, runs: int = 5) -> dict[str, Any]:
    """Each import ``runs`` times in fresh interpreters; each app started ``runs`` times (2 gthread workers)."""
    runs = 1 if smoke else runs
    workdir = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    body = _template(workdir)
    imports = {name: summary([import_seconds(code) for _ in range(runs)]) for name, code in IMPORTS.items()}
    sdks = subprocess.run([sys.executable, "-c", SDK_CHECK], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    env = {"GUNICORN_CMD_ARGS": "--worker-class gthread --threads 4"}
    starts: dict[str, list[dict[str, Any]]] = {"service": [], "baseline": []}
    for r in range(runs):
        for name in starts:
            d = workdir / f"{name}-{r}"
            d.mkdir()
            if name == "service":
                svc = Service(service_config(f"sqlite:///{d / 'fp.db'}"), d, env=env)
            else:
                svc = Service({}, d, env=env, app="bench.baseline_app:app")
            try:
                starts[name].append(start_and_measure(svc, body, 1 if smoke else 5))
            finally:
                svc.stop()
    out: dict[str, Any] = {"settings": {"runs": runs, "workers": 2, "worker_class": "gthread, 4 threads",
                                        "store": "sqlite"},
                           "import_s": imports, "sdk_modules_loaded_by_service_import": sdks, "startup": {}}
    for name, rows in starts.items():
        out["startup"][name] = {
            "first_answer_s": summary([x["first_answer_s"] for x in rows]),
            "first_webhook_s": summary([x["first_webhook_s"] for x in rows]),
            "worker_rss_cold_mib": summary([v for x in rows for v in x["worker_rss_cold_mib"]]),
            "worker_rss_warm_mib": summary([v for x in rows for v in x["worker_rss_warm_mib"]]),
            "master_rss_mib": summary([x["master_rss_mib"] for x in rows]), "runs": rows}
    return out


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary."""
    rows = ["import (fresh interpreter, wall)                          median s  [min-max]"]
    for name, s in res["import_s"].items():
        rows.append(f"  {name:56s} {s['median']:.3f}  [{s['min']:.3f}-{s['max']:.3f}]")
    rows.append(f"  cloud SDK modules loaded by importing the service: {res['sdk_modules_loaded_by_service_import']}")
    rows.append("start-up (2 workers)   first answer s  first webhook s  worker RSS MiB cold / warm")
    for name, v in res["startup"].items():
        rows.append(f"  {name:18s}  {v['first_answer_s']['median']:8.2f}  {v['first_webhook_s']['median']:14.2f}"
                    f"        {v['worker_rss_cold_mib']['median']:6.1f} / {v['worker_rss_warm_mib']['median']:.1f}")
    return rows
