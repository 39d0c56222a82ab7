"""The whole alert pipeline for a test session: dcgm stand-in, Prometheus, Alertmanager."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.dcgm_exporter import DcgmExporter, h100_pool
from tests.pipeline import (Alertmanager, Process, active_alerts, prometheus_query, start_alertmanager,
                            start_prometheus, test_rules, wait_for)

POOL = "gpu-sim"
NEUTRAL = 50.0


@dataclass
class Stack:
    """Running components; ``started_in`` is how long the start took (seconds)."""

    dcgm: DcgmExporter
    alertmanager: Alertmanager
    prometheus: Process
    started_in: float

    def reset(self, timeout: float = 15.0) -> None:
        """Neutral utilisation, no alert pending or firing, notifications going nowhere."""
        self.dcgm.set_utilization(NEUTRAL)
        wait_for(lambda: not active_alerts(self.prometheus), timeout, "Prometheus alerts to clear")
        self.alertmanager.route_to(None)

    def stop(self) -> None:
        """Stop every component."""
        for stop in (self.prometheus.stop, self.alertmanager.stop, self.dcgm.stop):
            try:
                stop()
            except Exception:  # noqa: BLE001 - keep stopping the others
                pass


def start_stack(workdir: Path) -> Stack:
    """Start everything and wait until Prometheus has scraped the stand-in and loaded the rules."""
    began = time.monotonic()
    dcgm = DcgmExporter(h100_pool(POOL), NEUTRAL).start()
    am: Alertmanager | None = None
    try:
        am = start_alertmanager(workdir / "alertmanager")
        prom_dir = workdir / "prometheus"
        prom_dir.mkdir()
        prom = start_prometheus(prom_dir, dcgm.target, am.base_url.removeprefix("http://"), test_rules())
    except BaseException:
        if am is not None:
            am.stop()
        dcgm.stop()
        raise
    stack = Stack(dcgm, am, prom, 0.0)
    try:
        wait_for(lambda: prometheus_query(prom, f'avg by (autoscaler_pool) (DCGM_FI_DEV_GPU_UTIL{{autoscaler_pool="{POOL}"}})'),
                 30, "Prometheus's first scrape of the dcgm stand-in")
    except BaseException:
        stack.stop()
        raise
    stack.started_in = time.monotonic() - began
    return stack
