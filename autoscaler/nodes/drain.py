"""Empty a node before the cloud removes it: cordon, evict every pod that would stop, wait until they are gone.

The same drain serves ``victims: movable`` and a manual ``"force": true``. Every pod of the node that is not a
DaemonSet's or a mirror pod goes through the Eviction API, so PodDisruptionBudgets are respected; refused ones are
asked again every ``RETRY_EVERY`` seconds until ``drain_timeout``. The node counts as drained only once a fresh
read shows none of its pods left (so a GPU pod that arrived meanwhile keeps it). Any failure uncordons the node and
says which pod held it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from autoscaler.cluster.nodes import Cluster, GpuPod, NodeView
from autoscaler.cluster.pods import PodFacts
from autoscaler.models import PoolSpec

RETRY_EVERY = 5.0  # seconds between eviction rounds


def _blocking(view: NodeView) -> tuple[str, bool]:
    """The first pod still on the node, and whether it is GPU work (named so in the reason)."""
    gpu = {f"{p.namespace}/{p.name}" for p in view.gpu_pods}
    keys = [p.key for p in view.pods] or sorted(gpu)
    first = next((k for k in keys if k in gpu), keys[0])
    return first, first in gpu


def drain(cluster: Cluster, spec: PoolSpec, view: NodeView, owner: str, renew: Callable[[], bool],
          wall: Callable[[], float], sleep: Callable[[float], None]) -> str | None:
    """Cordon ``view`` and evict its pods until none is left: None when drained (the node stays cordoned for the
    removal), else why not (the node uncordoned). ClusterError propagates with the node still cordoned: the
    caller unwinds."""
    cluster.cordon(view.name, owner, wall())
    deadline = wall() + spec.drain_timeout
    pending = view
    refused: dict[str, str] = {}
    while True:
        pods: Sequence[PodFacts | GpuPod] = pending.pods or pending.gpu_pods  # a Cluster that lists GPU pods only
        for pod in pods:
            answer = cluster.evict(pod.namespace, pod.name)
            if answer:
                refused[f"{pod.namespace}/{pod.name}"] = answer
            else:
                refused.pop(f"{pod.namespace}/{pod.name}", None)
        again = cluster.node(view.name)
        if again is None or not (again.pods or again.gpu_pods):
            return None
        pending = again
        if wall() >= deadline or not renew():
            key, gpu = _blocking(again)
            said = refused.get(key, "still running after its eviction")
            why = "its lease was lost" if wall() < deadline else \
                f"gave up after drain_timeout {spec.drain_timeout:.0f}s"
            cluster.uncordon(view.name)
            return f"{why}: {'GPU pod' if gpu else 'pod'} {key} blocks the drain ({said})"
        sleep(RETRY_EVERY)
