"""Stand-in for the engine's node-aware scale-in in the replay, until the engine takes a cluster itself.

The engine asks the simulated provider for a count; on a scale-in this provider picks the nodes through the real
``nodes.pick_victims`` on the replay's cluster and removes exactly those (none when every node runs GPU work, so
the pool stays as it is). What it does not do that the engine's own path does: cordon, re-check, record the kept
nodes, or answer ``skipped_in_use`` (the engine records ``scaled`` to the size reached).
"""
from __future__ import annotations

from autoscaler.models import CloudStatus
from autoscaler.nodes import pick_victims
from autoscaler.replay.cluster import ReplayCluster
from providers.base import NodeRef, Tracked
from providers.simulated import SimulatedProvider


class PickingProvider:
    """The pool's simulated provider, its count scale-in turned into a named removal of the picked nodes."""

    tracks_count = True

    def __init__(self, inner: SimulatedProvider, cluster: ReplayCluster, victims: str, floor: int) -> None:
        self.inner = inner
        self.cluster = cluster
        self.victims = victims
        self.floor = floor

    def check(self) -> None:
        """Nothing to check."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        return self.inner.status(tracked, now)

    def scale(self, current: int, target: int, now: float) -> int:
        if target >= current:
            return self.inner.scale(current, target, now)
        self.inner.sync(current)
        self.cluster.follow(self.inner.node_names(), now)
        chosen, _ = pick_victims(self.cluster.nodes({}), current - target, (), self.victims, self.floor)
        return self.inner.remove_nodes([NodeRef(n.name) for n in chosen], current, now)
