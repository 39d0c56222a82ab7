"""The all-or-nothing tests' rig: the app on a hand-moved clock with two simulated H100 pools in a group (the spot
pool delivers at most ``spot_capacity`` nodes of any size asked), the real kubernetes client against the fake API
server, where the test makes the pools' nodes appear (the simulated cloud's names) as it likes."""
from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.reconcile.loop import Reconciler
from providers.simulated import SimulatedProvider
from tests.support.fakes.kube import FakeKube
from tests.support import AUTH, FakeClock, config, post

NOW = 1_800_000_000.0
PROVISION = 600.0
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def pools(spot_capacity: int | None = 2, spot_max: int = 8, ondemand_max: int = 8) -> list[dict[str, Any]]:
    """spot (the group's first) and ondemand, 8 GPUs a node, both labelled H100."""
    spot = {"initial_count": 0} | ({"capacity": spot_capacity} if spot_capacity is not None else {})
    return [{"name": "spot", "provider": "simulated", "min": 0, "max": spot_max, "node_selector": "pool=spot",
             "node_labels": H100, "gpus_per_node": 8, "provision_time": PROVISION, "simulated": spot},
            {"name": "ondemand", "provider": "simulated", "min": 0, "max": ondemand_max,
             "node_selector": "pool=ondemand", "node_labels": H100, "gpus_per_node": 8,
             "provision_time": PROVISION, "simulated": {"initial_count": 0}}]


class Rig:
    """The app, its clock, reconciler, client and the fake cluster."""

    def __init__(self, tmp_path: Any, kube: FakeKube, clock: FakeClock | None = None,
                 providers: dict[str, Any] | None = None, **changes: Any) -> None:
        """``providers``: another rig's (one cloud that two replicas share); ``store_url``: the store (default a
        SQLite file in ``tmp_path``); other keys replace the config's."""
        self.kube = kube
        self.clock = clock or FakeClock(NOW)
        keys: dict[str, Any] = {"pools": pools(), "groups": [{"name": "h100", "pools": ["spot", "ondemand"]}],
                                "rules": []}
        if "clusters" not in changes:  # several clusters (their pools name each) instead of the one
            keys["kubernetes"] = {"host": kube.url, "token": kube.token}
        store = changes.pop("store_url", f"sqlite:///{tmp_path}/s.db")
        cfg = config(store, **(keys | changes))
        self.app: Flask = create_app(cfg, clock=self.clock, providers=providers, startup_check=False)
        self.client: FlaskClient = self.app.test_client()
        self.reconciler: Reconciler = self.app.extensions["autoscaler_reconciler"]

    def provider(self, pool: str) -> SimulatedProvider:
        provider = self.app.extensions["autoscaler"].providers[pool]
        assert isinstance(provider, SimulatedProvider)
        return provider

    def arrive(self, pool: str, ready: bool = True, only: int | None = None) -> list[str]:
        """The nodes the simulated cloud created for ``pool`` register in the cluster (``only``: the first few)."""
        names = list(self.provider(pool).node_names())[:only]
        for name in names:
            if name not in self.kube.nodes:
                self.kube.add_node(name, {"pool": pool, **H100}, ready=ready)
        return names

    def tick(self, after: float = 30.0) -> list[tuple[str | None, str]]:
        self.clock.advance(after)
        return [(d.pool, d.outcome.value) for d in self.reconciler.tick(self.clock()).decisions]

    def atomic(self, name: str, step: int, **more: Any) -> Any:
        return post(self.client, f"/api/v1/pools/{name}/scale",
                    {"action": "scale_out", "step": step, "atomic": True, **more})

    def current(self, pool: str) -> Any:
        return self.client.get(f"/api/v1/pools/{pool}", headers=AUTH).get_json()["current"]
