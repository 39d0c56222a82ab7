"""The whole alert pipeline for a test session: dcgm-exporter and kube-state-metrics stand-ins, Prometheus with the
shipped rules, Alertmanager. The pool's nodes carry AKS's agent-pool label ``gpusim``, which the rules' pool map
names ``gpu-sim`` (an AKS agent pool's name can't hold a dash)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.fakes.dcgm_exporter import DcgmExporter, h100_pool
from tests.support.fakes.kube_state_metrics import KubeStateMetrics
from tests.support.pipeline import (Alertmanager, Process, active_alerts, prometheus_query, start_alertmanager,
                            start_prometheus, test_rules, wait_for)

POOL = "gpu-sim"
AGENT_POOL = "gpusim"
NEUTRAL = 50.0


@dataclass
class Stack:
    """Running components; ``started_in`` is how long the start took (seconds)."""

    dcgm: DcgmExporter
    ksm: KubeStateMetrics
    alertmanager: Alertmanager
    prometheus: Process
    started_in: float

    def reset(self, timeout: float = 15.0) -> None:
        """Neutral utilisation, no pod waiting, no alert pending or firing, notifications going nowhere."""
        self.dcgm.set_utilization(NEUTRAL)
        self.ksm.set_pods([])
        wait_for(lambda: not active_alerts(self.prometheus), timeout, "Prometheus alerts to clear")
        self.alertmanager.route_to(None)

    def stop(self) -> None:
        """Stop every component."""
        for stop in (self.prometheus.stop, self.alertmanager.stop, self.dcgm.stop, self.ksm.stop):
            try:
                stop()
            except Exception:  # noqa: BLE001 - keep stopping the others
                pass


def start_stack(workdir: Path) -> Stack:
    """Start everything and wait until Prometheus has scraped the stand-ins and recorded the pool's utilisation."""
    began = time.monotonic()
    gpus = h100_pool(AGENT_POOL)
    dcgm = DcgmExporter(gpus, NEUTRAL).start()
    ksm = KubeStateMetrics({gpu.hostname: {"kubernetes.azure.com/agentpool": AGENT_POOL} for gpu in gpus}).start()
    am: Alertmanager | None = None
    try:
        am = start_alertmanager(workdir / "alertmanager")
        prom_dir = workdir / "prometheus"
        prom_dir.mkdir()
        rules = test_rules(pool_map={AGENT_POOL: POOL}, default_pool=POOL)
        prom = start_prometheus(prom_dir, {"dcgm-exporter": dcgm.target, "kube-state-metrics": ksm.target},
                                am.base_url.removeprefix("http://"), rules)
    except BaseException:
        if am is not None:
            am.stop()
        dcgm.stop()
        ksm.stop()
        raise
    stack = Stack(dcgm, ksm, am, prom, 0.0)
    try:
        wait_for(lambda: prometheus_query(prom, f'autoscaler_pool:gpu_utilization:avg{{autoscaler_pool="{POOL}"}}'),
                 30, "Prometheus's first scrape of the stand-ins and the rules' pool utilisation")
    except BaseException:
        stack.stop()
        raise
    stack.started_in = time.monotonic() - began
    return stack
