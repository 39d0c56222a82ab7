"""What a repair works with: the few parts of the service it uses, handed in (never the engine)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from autoscaler.cluster.nodes import Cluster
from autoscaler.config.load import Settings
from autoscaler.pool.door import Door
from autoscaler.pool.events import EventLog
from autoscaler.models import PoolSpec
from autoscaler.pool.hold import PoolHold
from autoscaler.store import Store
from providers import NodePoolProvider


@dataclass(frozen=True)
class RepairParts:
    """``hold``: every repair step holds its pool; ``door``: the replacement and the removal are asked through it;
    ``clusters``: each cluster by name (none without ``kubernetes:``: no pool repairs then; a pool's own is
    :meth:`cluster_for`); ``wall``: the decision's time."""

    settings: Settings
    store: Store
    providers: dict[str, NodePoolProvider]
    events: EventLog
    hold: PoolHold
    door: Door
    clusters: Mapping[str, Cluster]
    wall: Callable[[], float]

    def cluster_for(self, spec: PoolSpec) -> Cluster | None:
        """The cluster the pool's nodes join; None where none is configured for it."""
        return self.clusters.get(spec.cluster)
