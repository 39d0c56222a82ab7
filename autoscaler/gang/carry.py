"""Each tick, each waiting gang of a pool one step on: ``provisioned`` once every node asked is GPU-ready, or, past
its deadline with fewer (or sooner, once the cloud reports it cannot deliver the rest: ``fell_short``), the nodes
that came removed by name (``Door.remove``), the pool's size back to what it was (``rolled_back``), and the group's
next pool asked (a ProvisioningRequest's by ``requests.py``, for that pool's own node count). Never both pools left
grown: the next is asked only after the roll-back is recorded; and both ends take the pool's hold and settle the
gang there, so a replica whose tick overran its lease never records ``provisioned`` for a gang another rolls back.
A gang whose pool cannot be held this tick waits for the next."""
from __future__ import annotations

import logging
import uuid
from dataclasses import replace

from typing import Sequence

from autoscaler.cluster.nodes import ClusterError, NodeView
from autoscaler.decide.inflight import NOT_REGISTERED
from autoscaler.engine.parts import Parts
from autoscaler.gang.ask import Ask, ask_group
from autoscaler.models import Action, Decision, Outcome, PoolSpec, Shortfall, Source
from autoscaler.pool.door import changed, error_details
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from autoscaler.store.gangs import PROVISIONED, ROLLED_BACK, GangRecord
from providers import NodeRef, ProviderError, RemovesNamedNodes

log = logging.getLogger(__name__)


def carry_on(parts: Parts, spec: PoolSpec, now: float) -> list[Decision]:
    """One step for each waiting gang of the pool; the decisions recorded (none while every gang still waits).
    One node list of the pool a tick, and only where a gang waits."""
    gangs = parts.store.gangs(spec.name)
    cluster = parts.cluster_for(spec)
    if not gangs or cluster is None or not spec.node_selector:
        return []
    try:
        nodes = cluster.marked(dict(spec.node_selector))
    except ClusterError as exc:
        log.warning("gang pool=%s: nodes not listed (%s); the next tick looks again", spec.name, exc)
        return []
    out: list[Decision] = []
    for gang in gangs:
        came = [n for n in nodes if n.name not in set(gang.known)]
        ready = [n for n in came if n.gpu_ready]
        if len(ready) >= gang.asked:
            done = _provisioned(parts, spec, gang, ready, now)
            out += [done] if done is not None else []
        elif now >= gang.deadline:
            out += _roll_back(parts, spec, gang, came, len(ready), now)
    return out


def fell_short(parts: Parts, spec: PoolSpec, short: Shortfall, now: float,
               listed: Sequence[NodeView] | None) -> list[Decision]:
    """The cloud reports it cannot deliver what the pool was asked (its stockout or quota refusal, not our own
    "not ready in time" reading, which the deadline settles): each waiting gang the delivered count cannot complete
    is rolled back now, the pool marked short as ``no_capacity`` marks it, instead of billing the nodes that came until
    ``provision_time``. ``listed``: the pool's nodes as this tick listed them (None: not listed; the next tick)."""
    if short.code == NOT_REGISTERED or listed is None:
        return []
    out: list[Decision] = []
    for gang in parts.store.gangs(spec.name):
        if short.delivered < gang.target:
            came = [n for n in listed if n.name not in set(gang.known)]
            out += _roll_back(parts, spec, gang, came, sum(1 for n in came if n.gpu_ready), now, short)
    return out


def waiting(parts: Parts, spec: PoolSpec) -> bool:
    """Whether a gang waits on the pool (its shortfall is then the gang's to settle, not the capacity check's)."""
    return bool(parts.store.gangs(spec.name))


def _provisioned(parts: Parts, spec: PoolSpec, gang: GangRecord, ready: Sequence[NodeView],
                 now: float) -> Decision | None:
    """Under the pool's hold (None while another holds it: the next tick looks again), as the roll-back."""
    names = sorted(n.name for n in ready)[:gang.asked]
    reason = (f"all {gang.asked} node(s) of the atomic scale-out are GPU-ready after {now - gang.started:.0f}s"
              + (f" (ProvisioningRequest {gang.request})" if gang.request else ""))
    decision = Decision(spec.name, Action.SCALE_OUT, Outcome.PROVISIONED, gang.before, gang.target, reason,
                        details=_details(gang) | {"nodes": names})
    held = parts.hold.take(spec.name, parts.hold.owner(f"gang:{uuid.uuid4().hex}"), parts.hold.deadline())
    if held is None:
        return None
    with held:
        if not parts.store.settle_gang(gang.id, PROVISIONED, now, reason, tuple(names)):
            return None  # another worker settled it first
        return held.record(decision, Source.RECONCILE.value, [], now, PoolChange())


def _roll_back(parts: Parts, spec: PoolSpec, gang: GangRecord, came: Sequence[NodeView], ready: int,
               now: float, short: Shortfall | None = None) -> list[Decision]:
    """Under the pool's hold: the nodes that came removed by name, the size back to ``before``, recorded; then the
    group's next pool asked (after the record: never both grown). ``short``: the cloud's shortfall that ends the gang
    before its deadline (the pool is then marked short, as ``no_capacity`` marks it)."""
    held = parts.hold.take(spec.name, parts.hold.owner(f"gang:{uuid.uuid4().hex}"), parts.hold.deadline())
    if held is None:
        return []
    provider = parts.providers[spec.name]
    with held:
        if not any(g.id == gang.id for g in parts.store.gangs(spec.name)):
            return []  # settled meanwhile
        try:
            cloud = provider.status(held.state.tracked(), now)
        except ProviderError as exc:
            log.warning("gang pool=%s: status unread (%s); roll-back at the next tick", spec.name, exc.message)
            return []
        current = reached = cloud.current if cloud.current is not None else gang.target
        removed: list[str] = []
        problems: dict[str, object] = {}
        try:
            if came and isinstance(provider, RemovesNamedNodes) and provider.capabilities.removes_named_nodes:
                refs = [NodeRef(n.name, n.provider_id) for n in came]
                reached = parts.door.remove(spec, provider, refs, current, now, cloud)
                removed = [r.name for r in refs]
            if reached != gang.before:
                reached = parts.door.scale(spec, provider, reached, gang.before, now, None)
        except ProviderError as exc:
            if not removed:  # nothing changed: try again at the next tick
                log.warning("gang pool=%s: roll-back refused (%s); again at the next tick", spec.name, exc.message)
                return []
            problems = {"error": error_details(exc)}
        said = (f"the cloud cannot deliver the rest ({short.code}: {redact_text(short.message)}): {ready} of "
                f"{gang.asked} node(s) GPU-ready after {now - gang.started:.0f}s" if short is not None else
                f"{ready} of {gang.asked} node(s) GPU-ready within {spec.provision_time:.0f}s (provision_time)")
        why = (f"atomic scale-out fell short: {said}; removed {', '.join(removed) or 'no node'} by name, "
               f"size back from {current} to {reached}")
        decision = Decision(spec.name, Action.SCALE_OUT, Outcome.ROLLED_BACK, current, reached,
                            why + (f"; {redact_text(str(problems))}" if problems else ""),
                            details=_details(gang) | {"nodes": removed, "ready": ready} | problems
                            | ({"code": short.code} if short is not None else {}))
        change = changed(provider, now, reached)
        if short is not None:
            change = replace(change, short_until=now + spec.short_for,
                             short_reason=f"{short.code}: {redact_text(short.message)}"[:500])
        if not parts.store.settle_gang(gang.id, ROLLED_BACK, now, why):
            log.warning("gang pool=%s gang=%s settled by another worker during its roll-back", spec.name, gang.id)
        recorded = held.record(decision, Source.RECONCILE.value, [], now, change)
    log.info("gang rolled back pool=%s gang=%s removed=%s", spec.name, gang.id, ",".join(removed) or "-")
    out = [recorded]
    if gang.grp and not gang.request:  # a request's next pool is asked by its round, for that pool's own count
        ask = Ask(nodes=gang.asked, source=Source.RECONCILE.value, force=True, group=gang.grp, request=gang.request,
                  tried=gang.tried, reason=f"{spec.name} fell short of {gang.asked} node(s) at once; asked of group "
                                           f"{gang.grp}")
        out.append(ask_group(parts, gang.grp, ask, now))
    return out


def _details(gang: GangRecord) -> dict[str, object]:
    out: dict[str, object] = {"atomic": True, "gang": gang.id, "asked": gang.asked, "before": gang.before}
    return out | ({"group": gang.grp} if gang.grp else {}) | ({"request": gang.request} if gang.request else {})



