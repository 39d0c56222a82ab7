"""The service's parts, built once (by ``create_app``, or a replay) and handed to whoever needs them: the engine,
the reconciler, the API. Nobody reaches for a part through the engine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.clock import SYSTEM, Clock
from autoscaler.cluster.nodes import Cluster
from autoscaler.config.load import Settings
from autoscaler.models import PoolSpec
from autoscaler.nodes.actions import NodeActions
from autoscaler.nodes.scale_in import NodeScaleIn
from autoscaler.pool.door import Door
from autoscaler.pool.events import EventLog
from autoscaler.pool.hold import PoolHold
from autoscaler.repair.parts import RepairParts
from autoscaler.routing import Router
from autoscaler.store import Store
from providers import NodePoolProvider


@dataclass(frozen=True)
class Parts:
    """Each part once: ``hold`` is the one way anything changes a pool, ``door`` the one way a cloud is asked for a
    change, ``cluster`` the one cluster (None without ``kubernetes:``), ``nodes`` its node-aware steps."""

    settings: Settings
    store: Store
    providers: dict[str, NodePoolProvider]
    events: EventLog
    clock: Clock
    metrics: Any
    hold: PoolHold
    door: Door
    cluster: Cluster | None
    nodes: NodeActions
    repairs: RepairParts
    router: Router

    def cluster_for(self, spec: PoolSpec) -> Cluster | None:
        """The pool's cluster."""
        return self.cluster

    @classmethod
    def build(cls, settings: Settings, store: Store, providers: dict[str, NodePoolProvider], events: EventLog,
              clock: Clock = SYSTEM, metrics: Any = None, cluster: Cluster | None = None) -> Parts:
        server = settings.config.server
        hold = PoolHold(store, events, server.lock_wait, server.lease_ttl, clock)
        door = Door(metrics, clock)
        scale_in = NodeScaleIn(cluster, door, clock, store) if cluster is not None else None
        repairs = RepairParts(settings, store, providers, events, hold, door, cluster, clock.wall)
        return cls(settings, store, providers, events, clock, metrics, hold, door, cluster, NodeActions(scale_in),
                   repairs, Router(settings.config.routing, settings.config.rules, settings.groups))
