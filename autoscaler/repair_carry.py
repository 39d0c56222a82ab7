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
from typing import TYPE_CHECKING, Sequence

from autoscaler import repair_alerts
from autoscaler.cluster.nodes import REMOVING, ClusterError, NodeGone, NodeView
from autoscaler.cluster.pods import move_blocker
from autoscaler.durations import rfc3339
from autoscaler.events import OperatorAct
from autoscaler.lease import PoolHeld
from autoscaler.models import Action, Decision, OperatorOutcome, Outcome, PoolSpec, PoolState
from autoscaler.redact import redact_text
from autoscaler.scale_in import REPAIR_OWNER
from autoscaler.store import PoolChange, RepairRecord, StoreUnavailable
from providers import NodeRef, ProviderError, RemovesNamedNodes, Tracked

if TYPE_CHECKING:
    from autoscaler.engine import Engine

log = logging.getLogger(__name__)


def carry_on(engine: Engine, spec: PoolSpec, now: float, listed: Sequence[NodeView] | None) -> list[Decision]:
    """One step of each of the pool's repairs (none while the pool is paused, held elsewhere, or in dry run); first
    the pool's nodes cordoned by a repair the store no longer knows are uncordoned (``listed``: this tick's)."""
    if engine.nodes is None:
        return []
    stored = engine.store.repairs(spec.name)
    if listed is not None:
        _sweep(engine, spec, {r.node for r in stored}, listed)
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
        with engine.hold.holding(spec.name, "repair") as state:
            if state.paused:
                return []
            for repair in engine.store.repairs(spec.name):  # again, under the hold
                decision = _guarded_step(engine, spec, state, repair, engine.clock())
                if decision is not None:
                    out.append(decision)
    except PoolHeld:
        log.info("pool=%s repairs wait: the pool is held by another decision; next tick", spec.name)
    return out


def _sweep(engine: Engine, spec: PoolSpec, known: set[str], listed: Sequence[NodeView]) -> None:
    """Uncordon nodes a repair cordoned whose repair is gone (a cancel whose uncordon failed)."""
    assert engine.nodes is not None
    for view in listed:
        if view.cordon_owner == REPAIR_OWNER and view.name not in known:
            try:
                engine.nodes.cluster.uncordon(view.name)
                log.warning("pool=%s uncordoned %s: cordoned for a repair that has ended", spec.name, view.name)
            except ClusterError as exc:
                log.warning("pool=%s uncordon of %s failed: %s", spec.name, view.name, redact_text(str(exc)))


def _guarded_step(engine: Engine, spec: PoolSpec, state: PoolState, repair: RepairRecord,
                  now: float) -> Decision | None:
    """``_step``; an error no path expects is logged and kept on the repair, and the pool's other repairs go on."""
    try:
        return _step(engine, spec, state, repair, now)
    except StoreUnavailable:
        raise  # the tick is skipped; the next one tries again
    except Exception as exc:  # a bug or a library's surprise must not stop the other repairs or pools
        log.exception("pool=%s repair of %s: unexpected error", spec.name, repair.node)
        _keep(engine, spec, repair, now, f"unexpected error ({type(exc).__name__}); see the service log")
        return None


def _step(engine: Engine, spec: PoolSpec, state: PoolState, repair: RepairRecord, now: float) -> Decision | None:
    """One step of one repair: the decision it recorded (``repaired``), or None (it goes on next tick)."""
    assert engine.nodes is not None and spec.repair is not None
    cluster = engine.nodes.cluster
    try:
        view = cluster.node(repair.node)
        if view is None:
            return _ended(engine, spec, repair, now, None, f"node {repair.node} left the cluster by itself; its "
                                                            "repair ended")
        if not view.cordoned or view.cordon_owner != REPAIR_OWNER:  # a start that died before, or someone's uncordon
            cluster.cordon(repair.node, REPAIR_OWNER, now)
        if repair.replacement is None and spec.repair.replace:
            _replacement(engine, spec, state, repair, now)
        waiting = [w for w in (move_blocker(p, spec.movable_owners) for p in view.pods) if w]
        if view.protected and view.protected.startswith("node "):  # pods' protections: move_blocker says them
            waiting.insert(0, view.protected)
        late = now >= repair.since + spec.repair.grace
        evict = list(view.pods) if late else [p for p in view.pods if not move_blocker(p, spec.movable_owners)]
        answers = [(p.key, cluster.evict(p.namespace, p.name)) for p in evict]
        refused = [f"{key}: {why}" for key, why in answers if why]
    except ClusterError as exc:
        _keep(engine, spec, repair, now, f"kubernetes: {redact_text(str(exc))}")
        return None
    if evict:  # the next tick sees them gone (or asks again)
        state_now = "draining" if late or not waiting else "waiting"
        _keep(engine, spec, repair, now, "; ".join(refused)[:500], state_now,
              evicted=_evicted(repair) + [key for key, why in answers if not why])
        return None
    if waiting and not late:
        _keep(engine, spec, repair, now, "", "waiting")
        return None
    return _remove(engine, spec, repair, view, now, late)


def _keep(engine: Engine, spec: PoolSpec, repair: RepairRecord, now: float, error: str,  # 7: a step's
          state: str | None = None, evicted: list[str] | None = None) -> None:  # whole outcome, stored at once
    if error and error != repair.error:
        log.warning("pool=%s repair of %s goes on next tick: %s", spec.name, repair.node, error)
    engine.store.update_repair(spec.name, repair.node, now, state=state, error=error,
                               evicted=",".join(dict.fromkeys(evicted)) if evicted else None)


def _evicted(repair: RepairRecord) -> list[str]:
    """The pods (``namespace/name``) the repair evicted so far."""
    return [key for key in repair.evicted.split(",") if key]


def _replacement(engine: Engine, spec: PoolSpec, state: PoolState, repair: RepairRecord, now: float) -> None:
    """Ask again for the replacement a start could not get (the cloud was busy or failing), within max."""
    provider = engine.providers[spec.name]
    try:
        cloud = provider.status(Tracked(state.tracked_count, state.count_changed_at), now)
        if cloud.current is None:
            return
        target = min(spec.max, cloud.current + 1)
        reached = provider.scale(cloud.current, target, now, status=cloud) if target > cloud.current else target
    except ProviderError as exc:
        _keep(engine, spec, repair, now, f"replacement: {redact_text(exc.message)}")
        return
    engine.store.update_repair(spec.name, repair.node, now, replacement=reached)
    if reached > cloud.current:
        tracked = reached if not provider.capabilities.reports_count else None
        engine.store.update_pool(spec.name, None, PoolChange(at=now, acted=Action.SCALE_OUT, tracked_count=tracked))
        log.info("pool=%s replacement for %s asked: %d -> %d", spec.name, repair.node, cloud.current, reached)


def _remove(engine: Engine, spec: PoolSpec, repair: RepairRecord, view: NodeView, now: float,  # 6: the step's
            late: bool) -> Decision | None:  # reads (the node, the time) are handed on, never read twice
    """Remove exactly the node through the provider's named removal; ``repaired``, or the failure kept."""
    provider = engine.providers[spec.name]
    assert isinstance(provider, RemovesNamedNodes) and engine.nodes is not None
    state = engine.store.pool(spec.name)
    try:
        cloud = provider.status(Tracked(state.tracked_count, state.count_changed_at), now)
        current = cloud.current if cloud.current is not None else 1
        engine.store.update_repair(spec.name, repair.node, now, state="removing")
        reached = provider.remove_nodes([NodeRef(view.name, view.provider_id)], current, now, status=cloud)
    except ProviderError as exc:
        _keep(engine, spec, repair, now, f"removal: {redact_text(exc.message)}", "draining")
        return None
    try:  # the cloud has it now: a sweep leaves a node whose removal was asked alone (scale_in.REMOVAL_GRACE)
        engine.nodes.cluster.cordon(view.name, REPAIR_OWNER + REMOVING, now)
    except NodeGone:
        pass  # a cloud that removes at once took it already: nothing is left to mark
    except ClusterError as exc:
        log.warning("pool=%s %s: removal asked, mark not updated: %s", spec.name, view.name, redact_text(str(exc)))
    how = "drained after repair.grace" if late else "drained"
    tracked = reached if not provider.capabilities.reports_count else None
    return _ended(engine, spec, repair, now, (cloud.current, reached),
                  f"node {view.name} {how} and removed ({cloud.current} -> {reached})",
                  PoolChange(at=now, tracked_count=tracked))


def _ended(engine: Engine, spec: PoolSpec, repair: RepairRecord, now: float,  # 7: the two ends (removed, gone)
           sizes: tuple[int | None, int] | None, reason: str,  # share one record; each says its own sizes and why
           change: PoolChange | None = None) -> Decision:
    details = {"node": repair.node, "started": rfc3339(repair.since), "replacement": repair.replacement,
               "removed_by": "service" if sizes is not None else "gone", "why": repair.reason,
               "evicted": _evicted(repair), "xid": repair_alerts.xid_of(repair.reason, repair.node)}
    decision = Decision(spec.name, Action.REPAIR, Outcome.REPAIRED, sizes[0] if sizes else None,
                        sizes[1] if sizes else None, reason, details=details)
    return engine.events.repair_ended(decision, repair.node, now, change)


def cancel(engine: Engine, spec: PoolSpec, nodes: Sequence[str], actor: str, reason: str,  # 6: who and why
           on_behalf_of: str = "") -> list[str]:
    """End the named nodes' repairs (an operator's ``"cancel": true``): each forgotten with its event, then
    uncordoned; the replacement stays. ValueError naming the nodes that are not in repair (nothing is changed).
    ``on_behalf_of`` (the caller's X-Autoscaler-User) is a note, never the actor: anyone can write it."""
    assert engine.nodes is not None
    with engine.hold.holding(spec.name, "repair"):
        stored = {r.node: r for r in engine.store.repairs(spec.name)}
        missing = [n for n in nodes if n not in stored]
        if missing:
            raise ValueError(f"not in repair in pool {spec.name}: {', '.join(missing)}")
        now = engine.clock()
        who = actor + (f" (on behalf of {on_behalf_of})" if on_behalf_of else "")
        for name in nodes:
            act = OperatorAct(spec.name, Action.REPAIR.value, OperatorOutcome.REPAIR_CANCELLED,
                              f"repair of {name} cancelled by {who}" + (f": {reason}" if reason else ""), actor,
                              details={"node": name, "started": stored[name].since,
                                       **({"on_behalf_of": on_behalf_of} if on_behalf_of else {})})
            engine.store.cancel_repair_alerts(spec.name, name, now)  # first: its alert's repeats start nothing
            engine.events.repair_cancelled(act, name, now)
            try:  # forgotten first: a failed uncordon is lifted by the reconciler's sweep, never left unowned
                engine.nodes.cluster.uncordon(name)
            except ClusterError as exc:
                log.warning("pool=%s repair of %s cancelled; uncordon failed (the reconciler retries): %s",
                            spec.name, name, redact_text(str(exc)))
    return list(nodes)

