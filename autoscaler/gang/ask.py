"""Ask a pool for every node of a gang at once, under the pool's hold, through the door; the gang stored first.

The gang row is written before the cloud is asked (state ``waiting``): a worker that dies after the cloud took the
size leaves a row the reconciler carries on at its next tick (provisioned, or rolled back at the deadline); one that
dies before leaves a row whose pool never grew, which the deadline settles with nothing to remove.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from autoscaler.cluster.nodes import ClusterError
from autoscaler.decide.policy import cooldown_remaining
from autoscaler.engine.parts import Parts
from autoscaler.models import Action, Alert, CloudStatus, Decision, Outcome, PoolSpec, PoolState
from autoscaler.pool.door import changed, error_details, failed
from autoscaler.pool import stamps
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from autoscaler.store.gangs import FAILED, GangRecord
from providers import ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ask:
    """One all-or-nothing ask: ``nodes`` at once; ``group`` (its pools tried in order, those in ``tried``
    skipped), ``request`` (a ProvisioningRequest ``ns/name``, "" by hand); ``force`` skips cooldown and backoff."""

    nodes: int
    source: str
    reason: str
    alerts: tuple[Alert, ...] = ()
    group: str = ""
    request: str = ""
    tried: tuple[str, ...] = ()
    force: bool = False


def why_not(parts: Parts, spec: PoolSpec) -> str:
    """Why the pool cannot take an atomic scale-out at all ("" when it can): the service must see its nodes."""
    if parts.cluster_for(spec) is None:
        return "an atomic scale-out needs the `kubernetes:` section (the service must see the nodes become GPU-ready)"
    if not spec.node_selector:
        return f"an atomic scale-out needs the pool's node_selector (provider {spec.provider} has no default)"
    return ""


def ask_pool(parts: Parts, spec: PoolSpec, ask: Ask, now: float) -> Decision:
    """Every node of ``ask`` asked of ``spec`` at once (never clamped: over max is ``skipped_limit``, nothing asked),
    recorded as one decision; a ``scaled`` one leaves a waiting gang for the reconciler."""
    hold = parts.hold
    held = hold.take(spec.name, hold.owner(f"gang:{uuid.uuid4().hex}"), hold.deadline())
    plan = _decision(spec, ask, Outcome.SKIPPED_BUSY, None, None, f"another decision on pool {spec.name} is still "
                     "running; try again")
    if held is None:
        return parts.events.record(_with(plan, retry_after=hold.retry_after), ask.source, list(ask.alerts), now)
    with held:
        state, provider = held.state, parts.providers[spec.name]
        try:
            cloud = provider.status(state.tracked(), now)
        except ProviderError as exc:
            plan = _with(_decision(spec, ask, Outcome.FAILED, None, None, f"pool status: {redact_text(exc.message)}"),
                         details=error_details(exc), retry_after=(exc.retry_after or 30.0) if exc.retryable else None)
            return held.record(plan, ask.source, list(ask.alerts), now, PoolChange())
        current = cloud.current
        target = None if current is None else current + ask.nodes
        blocked = in_flight(parts, spec, ask) or _blocked(spec, state, cloud.busy, current, target, ask, now)
        if blocked is not None:
            return held.record(_decision(spec, ask, blocked[0], current, current, blocked[1]), ask.source,
                               list(ask.alerts), now, PoolChange())
        assert current is not None and target is not None
        if spec.dry_run:
            return held.record(_decision(spec, ask, Outcome.DRY_RUN, current, target, f"dry run: would ask all "
                                         f"{ask.nodes} node(s) at once"), ask.source, list(ask.alerts), now,
                               PoolChange())
        cluster = parts.cluster_for(spec)
        assert cluster is not None  # why_not() was asked first
        try:
            known = tuple(sorted(v.name for v in cluster.marked(dict(spec.node_selector))))
        except ClusterError as exc:
            plan = _decision(spec, ask, Outcome.FAILED, current, current, f"the pool's nodes could not be listed: "
                             f"{redact_text(str(exc))}")
            return held.record(_with(plan, retry_after=30.0), ask.source, list(ask.alerts), now, PoolChange())
        gang = GangRecord(id=uuid.uuid4().hex, pool=spec.name, before=current, asked=ask.nodes, started=now,
                          deadline=now + spec.provision_time, grp=ask.group, request=ask.request, known=known,
                          tried=ask.tried + (spec.name,), reason=ask.reason[:500], updated_at=now)
        parts.store.add_gang(gang)
        try:
            reached = parts.door.scale(spec, provider, current, target, now, cloud)
        except ProviderError as exc:
            parts.store.settle_gang(gang.id, FAILED, now, redact_text(exc.message))
            decision, change = failed(spec, not provider.capabilities.reports_count, state.failures,
                                      _decision(spec, ask, Outcome.SCALED, current, target, ask.reason), now, exc)
            return held.record(_with(decision, details={**decision.details, "atomic": True}), ask.source,
                               list(ask.alerts), now, change)
        decision = _decision(spec, ask, Outcome.SCALED, current, reached,
                             f"{ask.reason}: all {ask.nodes} node(s) asked at once; every one GPU-ready within "
                             f"{spec.provision_time:.0f}s (provision_time) or the nodes that came are removed")
        decision = _with(decision, details={**decision.details, "gang": gang.id, "deadline": gang.deadline})
        log.info("atomic scale-out pool=%s from=%d to=%d gang=%s", spec.name, current, reached, gang.id)
        return held.record(decision, ask.source, list(ask.alerts), now, changed(provider, now, reached,
                                                                              Action.SCALE_OUT))


def in_flight(parts: Parts, spec: PoolSpec, ask: Ask,
              waiting: Sequence[GangRecord] | None = None) -> tuple[Outcome, str] | None:
    """A gang still waiting on the pool (the nodes that come are counted as its: a second would mix them), or the
    same request's gang waiting on any pool (asked by another worker meanwhile): the ask waits (busy). ``waiting``:
    the gangs waiting as read earlier in the round (None: read now)."""
    for gang in parts.store.gangs() if waiting is None else waiting:
        if gang.pool == spec.name:
            return Outcome.SKIPPED_BUSY, (f"an atomic scale-out of {gang.asked} node(s) still waits on pool "
                                          f"{spec.name} (gang {gang.id}); asked once it is settled")
        other = parts.settings.pools.get(gang.pool)
        if ask.request and gang.request == ask.request and other is not None and other.cluster == spec.cluster:
            return Outcome.SKIPPED_BUSY, f"ProvisioningRequest {ask.request} already waits on pool {gang.pool}"
    return None


def _blocked(spec: PoolSpec, state: PoolState, busy: bool, current: int | None, target: int | None, ask: Ask,
             now: float) -> tuple[Outcome, str] | None:
    """What keeps the pool from taking the whole gang now (outcome, reason), or None."""
    if state.paused:
        return Outcome.SKIPPED_PAUSED, f"pool {spec.name} is paused" + (f": {state.pause_reason}"
                                                                         if state.pause_reason else "")
    if current is None or target is None:
        return Outcome.FAILED, "the pool's size is unknown"
    if busy:
        return Outcome.SKIPPED_BUSY, "the cloud is still working on an earlier change"
    if target > spec.max:
        return Outcome.SKIPPED_LIMIT, (f"all or nothing: {ask.nodes} node(s) at once would take the pool from "
                                       f"{current} past its max ({spec.max}); nothing asked")
    if not ask.force and state.backoff_until is not None and now < state.backoff_until:
        return Outcome.SKIPPED_BACKOFF, f"backing off after failures for {state.backoff_until - now:.0f}s"
    left = cooldown_remaining(spec, state, now)["scale_out"]
    if not ask.force and left > 0:
        return Outcome.SKIPPED_COOLDOWN, f"scale-out cooldown: {left:.0f}s left"
    return None


def _decision(spec: PoolSpec, ask: Ask, outcome: Outcome, before: int | None, to: int | None,
              reason: str) -> Decision:
    prefix = "" if reason.startswith(ask.reason) else f"{ask.reason}: "
    details: dict[str, object] = {"atomic": True, "nodes_asked": ask.nodes}
    details |= {"group": ask.group} if ask.group else {}
    details |= {"request": ask.request} if ask.request else {}
    return Decision(spec.name, Action.SCALE_OUT, outcome, before, to, prefix + reason, details=details)


def _with(decision: Decision, **values: Any) -> Decision:
    return replace(decision, **values)


def ask_group(parts: Parts, group: str, ask: Ask, now: float) -> Decision:
    """The gang asked of the group's first pool (in its order, those already tried skipped) that can hold all of
    it now: not paused, short, backing off or busy, and within max. None can: ``skipped_limit`` (nothing asked) on
    the group's first pool, the reason saying why each was passed over."""
    passed: list[str] = []
    names = parts.settings.groups[group]
    for name in names:
        spec = parts.settings.pools[name]
        why = "already tried" if name in ask.tried else why_not(parts, spec) or passed_over(parts, spec, ask, now)
        if not why:
            return ask_pool(parts, spec, replace(ask, group=group), now)
        passed.append(f"{name}: {why}")
    first = parts.settings.pools[names[0]]
    plan = _decision(first, replace(ask, group=group), Outcome.SKIPPED_LIMIT, None, None,
                     f"no pool of group {group} can take all {ask.nodes} node(s) at once: " + "; ".join(passed))
    return parts.events.record(plan, ask.source, list(ask.alerts), now)


@dataclass
class Reads:
    """What the pre-check of many asks in one round (``passed_over``; the ProvisioningRequests' round, however many
    requests wait) reads once: each pool's cloud status and stored state, and the gangs waiting. A pool asked is
    ``forget``-ten (the ask itself reads everything again, under the pool's hold)."""

    clouds: dict[str, CloudStatus | ProviderError] = field(default_factory=dict)
    states: dict[str, PoolState] = field(default_factory=dict)
    waiting: Sequence[GangRecord] | None = None

    def forget(self, pool: str) -> None:
        self.clouds.pop(pool, None)
        self.states.pop(pool, None)
        self.waiting = None


def passed_over(parts: Parts, spec: PoolSpec, ask: Ask, now: float, reads: Reads | None = None) -> str:
    """Why the group's choice passes this pool over for the gang ("" to ask it). ``reads``: what earlier asks of
    the same round read (kept in it); None: everything read now."""
    reads = Reads() if reads is None else reads
    state = reads.states.get(spec.name)
    if state is None:
        state = reads.states[spec.name] = stamps.read(parts.store, spec, now)
    if state.short_until is not None and now < state.short_until:
        return f"short of capacity ({state.short_reason or 'no reason given'})"
    read = reads.clouds.get(spec.name)
    if read is None:
        try:
            read = parts.providers[spec.name].status(state.tracked(), now)
        except ProviderError as exc:
            read = exc
        reads.clouds[spec.name] = read
    if isinstance(read, ProviderError):
        return f"unread ({redact_text(read.message)[:120]})"
    cloud = read
    if reads.waiting is None:
        reads.waiting = parts.store.gangs()
    blocked = in_flight(parts, spec, ask, reads.waiting) or _blocked(
        spec, state, cloud.busy, cloud.current, None if cloud.current is None else cloud.current + ask.nodes, ask, now)
    return blocked[1] if blocked is not None else ""
