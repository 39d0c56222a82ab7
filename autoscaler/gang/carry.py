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

from typing import Any, Sequence

from autoscaler.cluster.nodes import ClusterError, NodeView
from autoscaler.decide.inflight import NOT_REGISTERED
from autoscaler.engine.parts import Parts
from autoscaler.gang.ask import Ask, ask_group
from autoscaler.models import Action, CloudStatus, Decision, Outcome, PoolSpec, Shortfall, Source
from autoscaler.pool.door import changed, error_details
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from autoscaler.store.gangs import FAILED, PROVISIONED, ROLLED_BACK, GangRecord
from providers import NodeRef, ProviderError, RemovesNamedNodes

log = logging.getLogger(__name__)
SAY_EVERY = 300.0  # a roll-back refused again is said by an event at most this often (seconds)


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
            out += _roll_back(parts, spec, gang, came, len(ready), now, left=_left(gang, nodes))
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
            out += _roll_back(parts, spec, gang, came, sum(1 for n in came if n.gpu_ready), now, short,
                              _left(gang, listed))
    return out


def _left(gang: GangRecord, nodes: Sequence[NodeView]) -> int:
    """How many of the pool's nodes from before the ask have left it since (a job's nodes removed by name while
    the gang waited): the roll-back's size goes back to ``before`` less these."""
    return len(set(gang.known) - {n.name for n in nodes})


def given_up(parts: Parts, spec: PoolSpec) -> bool:
    """Whether the pool's latest gang was given up (settled ``failed`` past its deadline: its roll-back refused):
    a shortfall of the pool is then that gang's, whose group's next pool was already asked for all of it."""
    gangs = parts.store.gangs(spec.name, waiting=False)
    return bool(gangs) and gangs[-1].state == FAILED and gangs[-1].updated_at >= gangs[-1].deadline


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
               now: float, short: Shortfall | None = None, left: int = 0) -> list[Decision]:
    """Under the pool's hold: the nodes that came removed by name (a removal the cloud refuses for good, such as
    ``NodeNotInPool``, lowers the size instead), the size back to ``before``, recorded; then the group's next pool
    asked (after the record: never both grown). ``short``: the cloud's shortfall that ends the gang before its
    deadline (the pool is then marked short, as ``no_capacity`` marks it); ``left``: the pool's nodes from before
    the ask gone since (the size goes back to ``before`` less these). A roll-back refused is tried again at
    the next tick, said by an event at most every ``SAY_EVERY`` seconds, and given up ``provision_time`` past the
    deadline (``_refused``)."""
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
            out, ask_next = _refused(parts, held, spec, gang, exc, None, now)
        else:
            out, ask_next = _undo(parts, held, spec, gang, came, ready, now, short, cloud, max(0, gang.before - left))
    if not out or not ask_next:
        return out
    if gang.grp and not gang.request:  # a request's next pool is asked by its round, for that pool's own count
        ask = Ask(nodes=gang.asked, source=Source.RECONCILE.value, force=True, group=gang.grp, request=gang.request,
                  tried=gang.tried, reason=f"{spec.name} fell short of {gang.asked} node(s) at once; asked of group "
                                           f"{gang.grp}")
        out.append(ask_group(parts, gang.grp, ask, now))
    return out


def _undo(parts: Parts, held: Any, spec: PoolSpec, gang: GangRecord, came: Sequence[NodeView], ready: int,
          now: float, short: Shortfall | None, cloud: CloudStatus, back: int) -> tuple[list[Decision], bool]:
    """The roll-back's calls and record, under ``held`` (``cloud``: the pool's status read under it; ``back``: the
    size to go back to); and whether the group's next pool may be asked."""
    provider = parts.providers[spec.name]
    current = reached = cloud.current if cloud.current is not None else gang.target
    removed: list[str] = []
    problems: dict[str, object] = {}
    lowered = ""
    try:
        if came and isinstance(provider, RemovesNamedNodes) and provider.capabilities.removes_named_nodes:
            refs = [NodeRef(n.name, n.provider_id) for n in came]
            try:
                reached = parts.door.remove(spec, provider, refs, current, now, cloud)
                removed = [r.name for r in refs]
            except ProviderError as exc:
                if exc.retryable:
                    raise
                problems = {"error": error_details(exc)}  # refused for good: the size lowered (the cloud's pick)
                lowered = f"removal by name refused ({redact_text(exc.message)}): size lowered instead; "
        if reached > back:  # never grown by a roll-back
            reached = parts.door.scale(spec, provider, reached, back, now, None)
    except ProviderError as exc:
        if not removed:  # nothing changed: tried again at the next tick, within bounds
            return _refused(parts, held, spec, gang, exc, current, now)
        problems = {"error": error_details(exc)}
    said = (f"the cloud cannot deliver the rest ({short.code}: {redact_text(short.message)}): {ready} of "
            f"{gang.asked} node(s) GPU-ready after {now - gang.started:.0f}s" if short is not None else
            f"{ready} of {gang.asked} node(s) GPU-ready within {spec.provision_time:.0f}s (provision_time)")
    why = (f"atomic scale-out fell short: {said}; {lowered}removed {', '.join(removed) or 'no node'} by name, "
           f"size back from {current} to {reached}")
    decision = Decision(spec.name, Action.SCALE_OUT, Outcome.ROLLED_BACK, current, reached,
                        why + (f"; {redact_text(str(problems))}" if problems and not lowered else ""),
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
    return [recorded], True


def _refused(parts: Parts, held: Any, spec: PoolSpec, gang: GangRecord, exc: ProviderError, current: int | None,
             now: float) -> tuple[list[Decision], bool]:
    """A roll-back the cloud refused (or whose pool could not be read): tried again at the next tick, said by a
    ``failed`` event the first time and then at most every ``SAY_EVERY`` seconds; once ``provision_time`` has
    passed beyond the deadline the gang is settled ``failed`` (the pool may keep the nodes that came: the event
    says so) and the group's next pool may be asked (the bool)."""
    message = redact_text(exc.message)
    limit = gang.deadline + spec.provision_time
    size = f"size {current}" if current is not None else "its size unread"
    details = _details(gang) | {"error": error_details(exc)}
    if now >= limit:
        reason = (f"atomic scale-out {gang.id}: its roll-back was refused until provision_time past its deadline "
                  f"({message}); settled failed: pool {spec.name} may still hold the nodes that came ({size}), "
                  "see to them by hand")
        if not parts.store.settle_gang(gang.id, FAILED, now, reason[:500]):
            return [], False
        log.warning("gang pool=%s gang=%s: roll-back given up (%s)", spec.name, gang.id, message)
        decision = Decision(spec.name, Action.SCALE_OUT, Outcome.FAILED, current, current, reason, details=details)
        return [held.record(decision, Source.RECONCILE.value, [], now, PoolChange())], True
    log.warning("gang pool=%s gang=%s: roll-back refused (%s); again at the next tick", spec.name, gang.id, message)
    if gang.updated_at > gang.started and now - gang.updated_at < SAY_EVERY:
        return [], False
    parts.store.touch_gang(gang.id, now)
    reason = (f"atomic scale-out {gang.id}: roll-back refused ({message}); tried again each tick, settled failed "
              f"{limit - now:.0f}s from now if still refused ({size})")
    decision = Decision(spec.name, Action.SCALE_OUT, Outcome.FAILED, current, current, reason,
                        details=details | {"retrying": True})
    return [held.record(decision, Source.RECONCILE.value, [], now, PoolChange())], False


def _details(gang: GangRecord) -> dict[str, object]:
    out: dict[str, object] = {"atomic": True, "gang": gang.id, "asked": gang.asked, "before": gang.before}
    return out | ({"group": gang.grp} if gang.grp else {}) | ({"request": gang.request} if gang.request else {})



