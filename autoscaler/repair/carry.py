"""The reconciler's step for each node in repair (docs/repair.md), one step per tick, under the pool's hold.

Each tick reads the node once (one GET and one pod list): gone, the repair ends (``repaired``, it left by itself);
else GPU and other work that may move is evicted at once (Eviction API, PodDisruptionBudgets respected: a refusal is
asked again next tick); work that cannot move (a Job's pod, a protected pod, by the rules of ``victims: movable``)
keeps the node until it ends or ``repair.grace`` has passed, then it is evicted the same way; once nothing is left
(DaemonSet and mirror pods aside) exactly that node is removed through the provider's named removal (``repaired``).
Any failure is kept on the repair (``error``) and tried again next tick; nothing waits or sleeps here.
An operator's cancel (:func:`cancel`) ends a repair the other way: forgotten, then uncordoned.
"""
from __future__ import annotations

import logging
from typing import Sequence

from autoscaler.repair import alerts as repair_alerts
from autoscaler.cluster.nodes import REMOVING, ClusterError, NodeGone, NodeView
from autoscaler.cluster.pods import move_blocker
from autoscaler.config.durations import rfc3339
from autoscaler.pool.events import OperatorAct
from autoscaler.pool.door import changed
from autoscaler.pool.hold import Held, PoolHeld
from autoscaler.repair.parts import RepairParts
from autoscaler.models import Action, Decision, OperatorOutcome, Outcome, PoolSpec, Source
from autoscaler.redact import redact_text
from autoscaler.cluster.nodes import REPAIR_OWNER
from autoscaler.store import PoolChange, RepairMark, RepairRecord, StoreUnavailable
from providers import NodeRef, ProviderError, RemovesNamedNodes

log = logging.getLogger(__name__)


def carry_on(parts: RepairParts, spec: PoolSpec, now: float, listed: Sequence[NodeView] | None) -> list[Decision]:
    """One step of each of the pool's repairs (none while the pool is paused, held elsewhere, or in dry run); first
    the pool's nodes cordoned by a repair the store no longer knows are uncordoned (``listed``: this tick's)."""
    if parts.cluster_for(spec) is None:
        return []
    stored = parts.store.repairs(spec.name)
    if listed is not None:
        _sweep(parts, spec, {r.node for r in stored}, listed)
    if not stored:
        return []
    if spec.repair is None:  # the config lost `repair:` while repairs were stored: they wait for an operator
        log.warning("pool=%s has %d repair(s) stored but no `repair:` section: none is carried on; end each with "
                    "POST /api/v1/pools/%s/repair {\"nodes\": [...], \"cancel\": true}", spec.name, len(stored),
                    spec.name)
        return []
    if spec.dry_run:
        log.info("pool=%s dry run: %d repair(s) stored, none carried on", spec.name, len(stored))
        return []
    out: list[Decision] = []
    try:
        with parts.hold.holding(spec.name, "repair") as held:
            if held.state.paused:
                return []
            for repair in parts.store.repairs(spec.name):  # again, under the hold
                decision = _guarded_step(parts, held, spec, repair, parts.wall())
                if decision is not None:
                    out.append(decision)
    except PoolHeld:
        log.info("pool=%s repairs wait: the pool is held by another decision; next tick", spec.name)
    return out


def _sweep(parts: RepairParts, spec: PoolSpec, known: set[str], listed: Sequence[NodeView]) -> None:
    """Uncordon nodes a repair cordoned whose repair is gone (a cancel whose uncordon failed)."""
    cluster = parts.cluster_for(spec)
    assert cluster is not None
    for view in listed:
        if view.cordon_owner == REPAIR_OWNER and view.name not in known:
            try:
                cluster.uncordon(view.name)
                log.warning("pool=%s uncordoned %s: cordoned for a repair that has ended", spec.name, view.name)
            except ClusterError as exc:
                log.warning("pool=%s uncordon of %s failed: %s", spec.name, view.name, redact_text(str(exc)))


def _guarded_step(parts: RepairParts, held: Held, spec: PoolSpec, repair: RepairRecord,
                  now: float) -> Decision | None:
    """``_step``; an error no path expects is logged and kept on the repair, and the pool's other repairs go on."""
    try:
        return _step(parts, held, spec, repair, now)
    except StoreUnavailable:
        raise  # the tick is skipped; the next one tries again
    except Exception as exc:  # a bug or a library's surprise must not stop the other repairs or pools
        log.exception("pool=%s repair of %s: unexpected error", spec.name, repair.node)
        _keep(parts, spec, repair, now, f"unexpected error ({type(exc).__name__}); see the service log")
        return None


def _step(parts: RepairParts, held: Held, spec: PoolSpec, repair: RepairRecord, now: float) -> Decision | None:
    """One step of one repair: the decision it recorded (``repaired``), or None (it goes on next tick)."""
    cluster = parts.cluster_for(spec)
    assert cluster is not None and spec.repair is not None
    try:
        view = cluster.node(repair.node)
        if view is None:
            return _ended(held, spec, repair, now, None, f"node {repair.node} left the cluster by itself; its "
                                                            "repair ended")
        if not view.cordoned or view.cordon_owner != REPAIR_OWNER:  # a start that died before, or someone's uncordon
            cluster.cordon(repair.node, REPAIR_OWNER, now)
        if repair.replacement is None and spec.repair.replace:
            _replacement(parts, held, spec, repair, now)
        waiting = [w for w in (move_blocker(p, spec.movable_owners) for p in view.pods) if w]
        if view.protected and view.protected.startswith("node "):  # pods' protections: move_blocker says them
            waiting.insert(0, view.protected)
        late = parts.store.now(now) >= repair.since + spec.repair.grace  # ``since`` is on the store's clock
        evict = list(view.pods) if late else [p for p in view.pods if not move_blocker(p, spec.movable_owners)]
        answers = [(p.key, cluster.evict(p.namespace, p.name)) for p in evict]
        refused = [f"{key}: {why}" for key, why in answers if why]
    except ClusterError as exc:
        _keep(parts, spec, repair, now, f"kubernetes: {redact_text(str(exc))}")
        return None
    if evict:  # the next tick sees them gone (or asks again)
        state_now = "draining" if late or not waiting else "waiting"
        _keep(parts, spec, repair, now, "; ".join(refused)[:500], state_now,
              evicted=_evicted(repair) + [key for key, why in answers if not why])
        return None
    if waiting and not late:
        _keep(parts, spec, repair, now, "", "waiting")
        return None
    return _remove(parts, held, spec, repair, view, now, late)


def _keep(parts: RepairParts, spec: PoolSpec, repair: RepairRecord, now: float, error: str,
          state: str | None = None, evicted: list[str] | None = None) -> None:
    """A step's whole outcome stored at once: its state, its error (logged when new), the pods it evicted."""
    if error and error != repair.error:
        log.warning("pool=%s repair of %s goes on next tick: %s", spec.name, repair.node, error)
    parts.store.update_repair(spec.name, repair.node, now, state=state, error=error,
                               evicted=",".join(dict.fromkeys(evicted)) if evicted else None)


def _evicted(repair: RepairRecord) -> list[str]:
    """The pods (``namespace/name``) the repair evicted so far."""
    return [key for key in repair.evicted.split(",") if key]


def _replacement(parts: RepairParts, held: Held, spec: PoolSpec, repair: RepairRecord, now: float) -> None:
    """Ask again for the replacement a start could not get (the cloud was busy or failing), within max; a size the
    cloud took is recorded as its own event (``scaled``, source ``reconcile``) through the hold's final write."""
    provider = parts.providers[spec.name]
    try:
        cloud = provider.status(held.state.tracked(), now)
        if cloud.current is None:
            return
        target = min(spec.max, cloud.current + 1)
        reached = parts.door.scale(spec, provider, cloud.current, target, now, cloud) if target > cloud.current \
            else target
    except ProviderError as exc:
        _keep(parts, spec, repair, now, f"replacement: {redact_text(exc.message)}")
        return
    if reached <= cloud.current:
        parts.store.update_repair(spec.name, repair.node, now, replacement=reached)
    else:
        decision = Decision(spec.name, Action.SCALE_OUT, Outcome.SCALED, cloud.current, reached,
                            f"replacement for node {repair.node} in repair asked again: {cloud.current} -> {reached}",
                            details={"node": repair.node, "replacement": reached})
        held.record(decision, Source.RECONCILE.value, [], now, changed(provider, now, reached, Action.SCALE_OUT),
                    release=False, repairs=RepairMark(replaced=(repair.node,), replacement=reached, at=now))


def _remove(parts: RepairParts, held: Held, spec: PoolSpec, repair: RepairRecord, view: NodeView, now: float,
            late: bool) -> Decision | None:
    """Remove exactly the node through the provider's named removal; ``repaired``, or the failure kept."""
    provider = parts.providers[spec.name]
    cluster = parts.cluster_for(spec)
    assert isinstance(provider, RemovesNamedNodes) and cluster is not None
    state = parts.store.pool(spec.name)
    try:
        cloud = provider.status(state.tracked(), now)
        current = cloud.current if cloud.current is not None else 1
        parts.store.update_repair(spec.name, repair.node, now, state="removing")
        reached = parts.door.remove(spec, provider, [NodeRef(view.name, view.provider_id)], current, now, cloud)
    except ProviderError as exc:
        _keep(parts, spec, repair, now, f"removal: {redact_text(exc.message)}", "draining")
        return None
    try:  # the cloud has it now: a sweep leaves a node whose removal was asked alone (scale_in.REMOVAL_GRACE)
        cluster.cordon(view.name, REPAIR_OWNER + REMOVING, now)
    except NodeGone:
        pass  # a cloud that removes at once took it already: nothing is left to mark
    except ClusterError as exc:
        log.warning("pool=%s %s: removal asked, mark not updated: %s", spec.name, view.name, redact_text(str(exc)))
    how = "drained after repair.grace" if late else "drained"
    return _ended(held, spec, repair, now, (cloud.current, reached),
                  f"node {view.name} {how} and removed ({cloud.current} -> {reached})", changed(provider, now, reached))


def _ended(held: Held, spec: PoolSpec, repair: RepairRecord, now: float, sizes: tuple[int | None, int] | None,
           reason: str, change: PoolChange | None = None) -> Decision:
    """The repair's end (``repaired``, source ``reconcile``): the event, its change and the repair forgotten in one
    transaction, through the hold's final write (the pool stays held for its other repairs)."""
    details = {"node": repair.node, "started": rfc3339(repair.since), "replacement": repair.replacement,
               "removed_by": "service" if sizes is not None else "gone", "why": repair.reason,
               "evicted": _evicted(repair), "xid": repair_alerts.xid_of(repair.reason, repair.node),
               "cluster": spec.cluster}
    decision = Decision(spec.name, Action.REPAIR, Outcome.REPAIRED, sizes[0] if sizes else None,
                        sizes[1] if sizes else None, reason, details=details)
    return held.record(decision, Source.RECONCILE.value, [], now, change or PoolChange(), release=False,
                       repairs=RepairMark(ended=(repair.node,)))


def cancel(parts: RepairParts, spec: PoolSpec, nodes: Sequence[str], actor: str, reason: str,
           on_behalf_of: str = "") -> list[str]:
    """End the named nodes' repairs (an operator's ``"cancel": true``): each forgotten with its event, then
    uncordoned; the replacement stays. ValueError naming the nodes that are not in repair (nothing is changed).
    ``on_behalf_of`` (the caller's X-Autoscaler-User) is a note, never the actor: anyone can write it."""
    cluster = parts.cluster_for(spec)
    assert cluster is not None
    with parts.hold.holding(spec.name, "repair"):
        stored = {r.node: r for r in parts.store.repairs(spec.name)}
        missing = [n for n in nodes if n not in stored]
        if missing:
            raise ValueError(f"not in repair in pool {spec.name}: {', '.join(missing)}")
        now = parts.wall()
        who = actor + (f" (on behalf of {on_behalf_of})" if on_behalf_of else "")
        for name in nodes:
            act = OperatorAct(spec.name, Action.REPAIR.value, OperatorOutcome.REPAIR_CANCELLED,
                              f"repair of {name} cancelled by {who}" + (f": {reason}" if reason else ""), actor,
                              details={"node": name, "started": stored[name].since,
                                       **({"on_behalf_of": on_behalf_of} if on_behalf_of else {})})
            parts.store.cancel_repair_alerts(spec.name, name, now)  # first: its alert's repeats start nothing
            parts.events.repair_cancelled(act, name, now)
            try:  # forgotten first: a failed uncordon is lifted by the reconciler's sweep, never left unowned
                cluster.uncordon(name)
            except ClusterError as exc:
                log.warning("pool=%s repair of %s cancelled; uncordon failed (the reconciler retries): %s",
                            spec.name, name, redact_text(str(exc)))
    return list(nodes)

