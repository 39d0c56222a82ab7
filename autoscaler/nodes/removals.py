"""Nodes whose removal may have been sent: recorded before the cloud call, resolved by the cloud's view.

A decision records each node it is about to remove (the store's ``removal_intents``) before it asks the cloud,
and clears the record once the node carries the ``/removing`` cordon mark (the removal was accepted) or is
uncordoned again (it was refused). A worker killed during the call leaves the record behind, and its node cordoned
with an ordinary mark that the next decision's stale-cordon sweep would lift: the removal may have reached the
cloud, so the node would take new GPU pods while the cloud deletes it. :func:`resolve` tells the sweep, node by
node, what the cloud's view (read by the decision, under the pool's lease: the killed worker's call is over by
then) says of each record:

- the node is gone from the cluster: forget the record;
- the cloud counts the pool's machines, is at rest and has fewer than the removal was decided on, or it cannot
  count them (a webhook that tracks the count; the removal may have gone): the removal went, so the node gets the
  ``/removing`` mark (dated from the record) that keeps it cordoned for ``REMOVAL_GRACE``, and the record goes;
- the cloud is still changing the pool: keep the node cordoned and the record, and look again next time;
- the cloud is at rest at the size the removal was decided on (or more): the removal never reached it, the node
  is still wanted; forget the record, and the sweep uncordons the node as any stale cordon.

A record older than ``REMOVAL_GRACE`` is resolved as "still wanted", as a ``/removing`` mark that old is.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from autoscaler.cluster.nodes import REMOVING, Cluster, NodeGone, NodeView
from autoscaler.models import CloudStatus
from autoscaler.store import RemovalIntent, Store, StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Seen:
    """What a decision read of the cloud: its status, and whether that status counts the pool's machines."""

    status: CloudStatus | None
    counts: bool


def verdict(intent: RemovalIntent, seen: Seen | None, now: float, grace: float) -> str:
    """``sent``, ``wanted`` or ``wait`` for one recorded removal whose node is still in the cluster."""
    if now - intent.at > grace:
        return "wanted"
    if seen is None or seen.status is None:
        return "wait"
    if not seen.counts:
        return "sent"
    if seen.status.busy or seen.status.current is None:
        return "wait"
    return "sent" if seen.status.current < intent.from_count else "wanted"


def resolve(cluster: Cluster, store: Store | None, pool: str, views: Sequence[NodeView], seen: Seen | None,
           now: float, grace: float) -> set[str]:
    """Settle the pool's recorded removals (see the module); the nodes to leave cordoned and never pick now."""
    if store is None:
        return set()
    intents = store.removal_intents(pool)
    if not intents:
        return set()
    present = {view.name for view in views}
    held: set[str] = set()
    resolved = [i.node for i in intents if i.node not in present]
    try:
        for intent in intents:
            if intent.node not in present:
                continue
            said = verdict(intent, seen, now, grace)
            if said == "wait":
                held.add(intent.node)
                continue
            if said == "sent":
                try:
                    cluster.cordon(intent.node, intent.owner.removesuffix(REMOVING) + REMOVING, intent.at)
                except NodeGone:
                    pass
                held.add(intent.node)
            resolved.append(intent.node)
            log.warning("pool=%s node %s: its removal may have been sent by a decision that stopped; the cloud "
                        "says %s", pool, intent.node, "it went (kept cordoned)" if said == "sent"
                        else "it is still wanted (its cordon is lifted)")
    finally:
        store.forget_removals(pool, resolved)
    return held


def forget(store: Store | None, pool: str, keep: Sequence[str], names: Sequence[str]) -> None:
    """Clear the records of ``names`` but ``keep`` (cordons not resolved: the next sweep resolves them)."""
    if store is None:
        return
    try:
        store.forget_removals(pool, [name for name in names if name not in keep])
    except StoreUnavailable:  # the records stay; the next decision's sweep resolves them from the cloud's view
        log.warning("pool=%s removal records of %s not cleared: store unavailable", pool, ", ".join(names))
