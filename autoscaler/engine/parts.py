"""The service's parts, built once (by ``create_app``, or a replay) and handed to whoever needs them: the engine,
the reconciler, the API. Nobody reaches for a part through the engine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from autoscaler.clock import SYSTEM, Clock
from autoscaler.cluster.nodes import Cluster
from autoscaler.config import DEFAULT_CLUSTER
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
    change, ``clusters`` each cluster by name (none without ``kubernetes:`` or ``clusters:``; a pool's own is
    :meth:`cluster_for`), ``nodes`` the node-aware steps, each in the pool's own cluster."""

    settings: Settings
    store: Store
    providers: dict[str, NodePoolProvider]
    events: EventLog
    clock: Clock
    metrics: Any
    hold: PoolHold
    door: Door
    clusters: Mapping[str, Cluster]
    nodes: NodeActions
    repairs: RepairParts
    router: Router

    @classmethod
    def build(cls, settings: Settings, store: Store, providers: dict[str, NodePoolProvider], events: EventLog,
              clock: Clock = SYSTEM, metrics: Any = None, cluster: Cluster | None = None,
              clusters: Mapping[str, Cluster] | None = None) -> Parts:
        """``clusters``: each configured cluster by name; ``cluster``: the one cluster alone (named "default",
        as ``kubernetes:`` names it: the replay's, a test's)."""
        server = settings.config.server
        hold = PoolHold(store, events, server.lock_wait, server.lease_ttl, clock,
                        {name: spec.short_for for name, spec in settings.pools.items()})
        door = Door(metrics, clock)
        known = dict(clusters or {}) | ({DEFAULT_CLUSTER: cluster} if cluster is not None else {})
        scale_ins = {name: NodeScaleIn(c, door, clock, store) for name, c in known.items()}
        repairs = RepairParts(settings, store, providers, events, hold, door, known, clock.wall)
        return cls(settings, store, providers, events, clock, metrics, hold, door, known, NodeActions(scale_ins),
                   repairs, Router(settings.config.routing, settings.config.rules, settings.groups))

    def cluster_for(self, spec: PoolSpec) -> Cluster | None:
        """The cluster the pool's nodes join (``spec.cluster``); None where no cluster is configured for it."""
        return self.clusters.get(spec.cluster)
