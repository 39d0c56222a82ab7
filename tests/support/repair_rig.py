"""The repair tests' rig: the app on a hand-moved clock with a repairing pool (the webhook provider against a
receiver), the real kubernetes client against a fake API server seeded with four GPU nodes, and what the tests read."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.cluster.nodes import CORDON_ANNOTATION
from autoscaler.reconcile.loop import Reconciler
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, FakeClock, config

LABELS = {"agentpool": "gpunp"}
NOW = 1_800_000_000.0
GRACE = 600.0


@contextmanager
def seeded_kube() -> Iterator[FakeKube]:
    """Four 8-GPU nodes: a training Job on gpunp-0, an inference replica on gpunp-1, gpunp-2 and -3 idle."""
    with FakeKube() as fake:
        for i in range(4):
            fake.add_node(f"gpunp-{i}", LABELS, created=f"2026-11-0{i + 1}T00:00:00Z")
            fake.add_pod(f"dcgm-{i}", f"gpunp-{i}", owner="DaemonSet", namespace="gpu-operator")
        fake.add_node("cpu-0", {"agentpool": "system"})
        fake.add_pod("train-7", "gpunp-0", gpus=8)  # owned by a Job
        fake.add_pod("infer-a", "gpunp-1", gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        yield fake


class Rig:
    """The app, its clock, its reconciler and a client."""

    def __init__(self, app: Flask, clock: FakeClock) -> None:
        self.app, self.clock = app, clock
        self.client: FlaskClient = app.test_client()
        self.reconciler: Reconciler = app.extensions["autoscaler_reconciler"]

    def tick(self, after: float = 30.0) -> list[dict[str, Any]]:
        self.clock.advance(after)
        return [{"outcome": d.outcome.value, "reason": d.reason, "details": d.details}
                for d in self.reconciler.tick(self.clock()).decisions]

    def repairs(self) -> list[dict[str, Any]]:
        return self.client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["repairs"]  # type: ignore[no-any-return]

    def last_event(self) -> dict[str, Any]:
        return self.client.get("/api/v1/events?limit=1", headers=AUTH).get_json()["events"][0]  # type: ignore


def rig(tmp_path: Any, kube: FakeKube, url: str, dry_run: bool = False, **repair: Any) -> Rig:
    clock = FakeClock(NOW)
    pool = {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": url, "initial_count": 4}, "dry_run": dry_run,
            "repair": {"max_unhealthy": 1, "grace": GRACE, **repair}}
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
    return Rig(create_app(cfg, clock=clock, startup_check=False), clock)


def cordoned(kube: FakeKube, name: str) -> bool:
    node = kube.nodes[name]
    return bool(node["spec"].get("unschedulable")) and CORDON_ANNOTATION in node["metadata"]["annotations"]


def scale_calls(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.body for r in receiver.received]
