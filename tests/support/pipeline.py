"""Start real Prometheus, Alertmanager and VictoriaMetrics as the test's own processes on 127.0.0.1."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest
import yaml

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpu-autoscaler-rules.yml"
DEMAND_RULES = ROOT / "deploy" / "prometheus" / "gpu-demand-rules.yml"
PROMETHEUS = ("prometheus",)
ALERTMANAGER = ("prometheus-alertmanager", "alertmanager")
AMTOOL = ("amtool",)
PROMTOOL = ("promtool",)
VICTORIA_METRICS = ("victoria-metrics", "victoria-metrics-prod")


def find_binary(*names: str) -> str | None:
    """The first of ``names`` on PATH (Debian names its Alertmanager ``prometheus-alertmanager``)."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def require_binary(*names: str) -> str:
    """The binary's path; skips the test with a reason when it is missing, but fails under CI=true."""
    path = find_binary(*names)
    if path is None:
        reason = f"{' or '.join(names)} not installed (Debian: apt-get install it, or run `make test` as root)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return path



def routed(config: Path, labels: dict[str, str]) -> list[str]:
    """The receivers ``amtool config routes test`` resolves for one alert's labels in an Alertmanager config."""
    out = subprocess.run([require_binary(*AMTOOL), "config", "routes", "test", f"--config.file={config}",
                          *(f"{k}={v}" for k, v in sorted(labels.items()))],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET a URL; (status, body), status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1 only
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (OSError, urllib.error.URLError):
        return 0, b""


def http_post(url: str, data: bytes = b"", timeout: float = 5.0) -> int:
    """POST to a URL; the status, 0 when nothing answers."""
    req = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1 only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError):
        return 0


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Process:
    """A child process with its output in a log file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], workdir: Path, base_url: str) -> None:
        self.name = name
        self.base_url = base_url
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir,
                                     start_new_session=True)

    def wait_ready(self, path: str, timeout: float = 20.0) -> None:
        """Wait until ``GET path`` answers 200; fail with the log's tail if the process died or took too long."""
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            return http_get(self.base_url + path)[0] == 200
        try:
            wait_for(ready, timeout, f"{self.name} at {self.base_url}{path}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the process wrote."""
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the process (SIGKILL after 5 s) and close its log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


P = TypeVar("P", bound=Process)


def _started(proc: P, path: str) -> P:
    """``proc`` once ``GET path`` answers 200; stopped, and the error raised, when it does not."""
    try:
        proc.wait_ready(path)
    except Exception:
        proc.stop()
        raise
    return proc


def test_rules(for_high: str = "0s", for_low: str = "0s", pool_map: dict[str, str] | None = None,
               default_pool: str | None = None) -> dict[str, Any]:
    """The shipped scaling and demand rules with their ``for`` shortened for a test (``for_high`` for
    GPUUtilizationHigh, ``for_low`` for the others), ``pool_map`` (cloud pool -> pool) in place of the example map
    and ``default_pool`` in place of the example default pool of the demand rules (None: no default pool)."""
    groups = [g for path in (RULES, DEMAND_RULES) for g in yaml.safe_load(path.read_text())["groups"]]
    for group in groups:
        rules = [r for r in group["rules"] if r.get("record") not in ("autoscaler_pool_map", "autoscaler_default_pool")]
        for rule in rules:
            if "alert" in rule:
                rule["for"] = for_high if rule["alert"] == "GPUUtilizationHigh" else for_low
        group["rules"] = rules
    # first in their group, so that the later rules see them in the same evaluation
    groups[0]["rules"] = [{"record": "autoscaler_pool_map", "expr": "vector(1)",
                           "labels": {"cloud_pool": cloud, "autoscaler_pool": pool}}
                          for cloud, pool in (pool_map or {}).items()] + groups[0]["rules"]
    if default_pool:
        groups[1]["rules"].insert(0, {"record": "autoscaler_default_pool", "expr": "vector(1)",
                                      "labels": {"autoscaler_pool": default_pool}})
    return {"groups": groups}


test_rules.__test__ = False  # type: ignore[attr-defined]  # a helper, not a pytest test


def start_prometheus(workdir: Path, scrape_target: str | dict[str, str], alertmanager: str, rules: dict[str, Any],
                     interval: str = "250ms") -> Process:
    """Prometheus scraping ``scrape_target`` (one target of job dcgm-exporter, or job name -> target) and evaluating
    ``rules`` every ``interval``, alerting ``alertmanager``."""
    targets = scrape_target if isinstance(scrape_target, dict) else {"dcgm-exporter": scrape_target}
    binary = require_binary(*PROMETHEUS)
    port = free_port()
    (workdir / "rules.yml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(workdir / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                           for job, target in targets.items()],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    return _started(Process("prometheus", [
        binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--rules.alert.resend-delay=1s", "--log.level=warn",
    ], workdir, f"http://127.0.0.1:{port}"), "/-/ready")


def alertmanager_config(receiver: str, url: str | None, credentials: str | None) -> dict[str, Any]:
    """group_wait 0s, group_interval 250ms, one webhook receiver with a bearer token (none when ``url`` is None)."""
    hook: dict[str, Any] = {"url": url, "send_resolved": True}
    if credentials is not None:
        hook["http_config"] = {"authorization": {"type": "Bearer", "credentials": credentials}}
    return {
        "route": {"receiver": receiver, "group_by": ["alertname", "autoscaler_pool"], "group_wait": "0s",
                  "group_interval": "250ms", "repeat_interval": "1h"},
        "receivers": [{"name": receiver, **({"webhook_configs": [hook]} if url else {})}],
    }


class Alertmanager(Process):
    """Alertmanager whose webhook target a test can switch with ``route_to`` (rewrite config + reload)."""

    receivers = 0

    def route_to(self, url: str | None, credentials: str | None = None) -> None:
        """Send notifications to ``url`` from now on, under a new receiver name (so no earlier state suppresses)."""
        Alertmanager.receivers += 1
        config = alertmanager_config(f"hook-{Alertmanager.receivers}", url, credentials)
        (self.log_path.parent / "alertmanager.yml").write_text(yaml.safe_dump(config))
        status = http_post(self.base_url + "/-/reload")
        if status != 200:
            raise RuntimeError(f"alertmanager reload answered {status}:\n{self.log_tail()}")


def start_alertmanager(workdir: Path, url: str | None = None, credentials: str | None = None,
                       port: int | None = None) -> Alertmanager:
    """Alertmanager on 127.0.0.1 with clustering off and its own data dir, ready to receive alerts."""
    binary = require_binary(*ALERTMANAGER)
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config("hook-0", url, credentials)))
    return _started(Alertmanager("alertmanager", [
        binary, f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn",
    ], workdir, f"http://127.0.0.1:{port}"), "/-/ready")


def start_victoria_metrics(workdir: Path) -> Process:
    """VictoriaMetrics (it accepts InfluxDB v2 writes on ``/api/v2/write``) with its own data dir."""
    binary = require_binary(*VICTORIA_METRICS)
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    return _started(Process("victoria-metrics", [
        binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={workdir / 'data'}",
        "-search.latencyOffset=0s", "-loggerLevel=WARN",
    ], workdir, f"http://127.0.0.1:{port}"), "/health")


def prometheus_query(prom: Process, query: str) -> list[dict[str, Any]]:
    """An instant query's result vector ([] when there is none or Prometheus can't answer)."""
    status, body = http_get(f"{prom.base_url}/api/v1/query?query={urllib.request.quote(query)}")
    if status != 200:
        return []
    return list(json.loads(body)["data"]["result"])


def active_alerts(prom: Process) -> list[dict[str, Any]]:
    """Prometheus's pending and firing alerts."""
    status, body = http_get(f"{prom.base_url}/api/v1/alerts")
    return list(json.loads(body)["data"]["alerts"]) if status == 200 else []
