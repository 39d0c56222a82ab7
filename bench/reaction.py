"""Benchmark 3: seconds from a GPU metric crossing the threshold to the provider call, through real Prometheus
and Alertmanager, split into rule evaluation, Alertmanager delivery and our own handling."""
from __future__ import annotations

import io
import json
import logging
import re
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import yaml

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from bench.common import TOKEN, summary
from providers import build
from tests.support.app_server import AppServer, RecordingProvider
from tests.support.pipeline import active_alerts, http_post
from tests.support.pipeline_stack import POOL, Stack, start_stack

# Published defaults of the alternatives, for the table (not measured here).
ALTERNATIVES = {"KEDA pollingInterval": 30.0, "HPA --horizontal-pod-autoscaler-sync-period": 15.0,
                "cluster-autoscaler --scan-interval": 10.0}


def _parse_time(stamp: str) -> float:
    """RFC 3339 (Prometheus gives nanoseconds; Python takes microseconds) to Unix seconds."""
    stamp = re.sub(r"(\.\d{1,6})\d*", r"\1", stamp.replace("Z", "+00:00"))
    return datetime.fromisoformat(stamp).timestamp()


class Receipts:
    """WSGI middleware noting when each webhook arrived (wall clock) and the startsAt of its first firing alert."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.seen: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") == "/webhook/alertmanager":
            arrived = time.time()
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
            firing = [a for a in json.loads(body).get("alerts", []) if a.get("status") == "firing"]
            if firing:
                with self.lock:
                    self.seen.append((arrived, str(firing[0].get("startsAt", ""))))
        return self.app(environ, start_response)


def _slow_group_wait(stack: Stack, group_wait: str) -> None:
    """Rewrite Alertmanager's route with ``group_wait`` and reload it."""
    path = stack.alertmanager.log_path.parent / "alertmanager.yml"
    cfg = yaml.safe_load(path.read_text())
    cfg["route"]["group_wait"] = group_wait
    path.write_text(yaml.safe_dump(cfg))
    if http_post(stack.alertmanager.base_url + "/-/reload") != 200:
        raise RuntimeError("alertmanager reload failed")


def one_run(stack: Stack, workdir: Path, group_wait: str | None, timeout: float) -> dict[str, Any]:
    """Utilisation 50 -> 95 and time each stage until the provider's scale call."""
    stack.reset()
    settings = build_settings({
        "server": {"auth": {"bearer_tokens": [TOKEN]}},
        "store": {"url": f"sqlite:///{workdir / 'reaction.db'}"},
        "defaults": {"scale_out": {"step": 1, "cooldown": 0}, "dedup_window": 0,
                     "scale_in": {"step": 1, "cooldown": 0, "delay_after_scale_out": 0}},
        "pools": [{"name": POOL, "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2}}],
    }, env={})
    spec = settings.pools[POOL]
    provider = RecordingProvider(build(spec.provider, POOL, spec.provider_settings))
    app = create_app(settings, providers={POOL: provider})
    receipts = Receipts(app.wsgi_app)
    app.wsgi_app = receipts  # type: ignore[method-assign]
    server = AppServer(app)
    try:
        stack.alertmanager.route_to(server.url + "/webhook/alertmanager", TOKEN)
        if group_wait:
            _slow_group_wait(stack, group_wait)
        time.sleep(0.5)  # let a scrape of the neutral value land
        offset = time.time() - time.monotonic()
        changed = time.time()
        stack.dcgm.set_utilization(95)
        call = provider.wait_call(lambda c: c.target > c.current, timeout=timeout)
        if call is None:
            raise RuntimeError(f"no scale-out call within {timeout:.0f}s")
        called = call.at + offset
        active = [a for a in active_alerts(stack.prometheus) if a["labels"].get("alertname") == "GPUUtilizationHigh"]
        active_at = _parse_time(active[0]["activeAt"]) if active else float("nan")
        received, starts_at = receipts.seen[0]
    finally:
        server.stop()
        stack.reset()
    return {"changed_to_active_s": active_at - changed, "active_to_received_s": received - active_at,
            "received_to_provider_ms": (called - received) * 1000, "total_s": called - changed,
            "starts_at_minus_active_ms": (_parse_time(starts_at) - active_at) * 1000}


def run(smoke: bool = False, runs: int = 5) -> dict[str, Any]:
    """Fast pipeline settings (scrape/eval 250 ms, group_wait 0) x runs, then group_wait 30 s x runs (full run)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-reaction-"))
    if not logging.getLogger().handlers:  # the in-process app logs to a file, not over the table
        logging.basicConfig(filename=workdir / "app.log", level=logging.INFO)
    stack = start_stack(workdir / "stack")
    results: dict[str, Any] = {"settings": {"scrape_and_eval_interval": "250ms", "for": "0s", "group_wait": "0s",
                                            "group_interval": "250ms", "runs": 1 if smoke else runs},
                               "alternatives_defaults_s": ALTERNATIVES, "stack_start_s": stack.started_in}
    try:
        rows = [one_run(stack, workdir / f"run-{i}", None, 15) for i in range(1 if smoke else runs)]
        results["fast"] = {"runs": rows, **{k: summary([r[k] for r in rows]) for k in rows[0]}}
        if not smoke:
            slow = [one_run(stack, workdir / f"run-gw30-{i}", "30s", 60) for i in range(runs)]
            results["group_wait_30s"] = {"runs": slow, **{k: summary([r[k] for r in slow]) for k in slow[0]}}
    finally:
        stack.stop()
    return results


def table(res: dict[str, Any]) -> list[str]:
    """Rows for the printed summary."""
    rows = ["settings                 metric->ALERTS active  active->webhook  webhook->provider  total (median)"]
    for name in ("fast", "group_wait_30s"):
        if name not in res:
            continue
        v = res[name]
        rows.append(f"{name:24s} {v['changed_to_active_s']['median']:8.2f} s          "
                    f"{v['active_to_received_s']['median']:7.2f} s      "
                    f"{v['received_to_provider_ms']['median']:7.1f} ms"
                    f"         {v['total_s']['median']:6.2f} s  [{v['total_s']['min']:.2f}-{v['total_s']['max']:.2f}]")
    rows.append("published defaults: " + ", ".join(f"{k} {v:.0f}s" for k, v in res["alternatives_defaults_s"].items()))
    return rows
