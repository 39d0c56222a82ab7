"""A pool whose cloud accepted a size and could not deliver it: record ``no_capacity``, give the undelivered size
back, mark the pool short, and ask the pool's group for what it did not deliver.

The reconciler calls :func:`check` when a pool's status carries a :class:`~autoscaler.models.Shortfall` (each
provider reports it from its cloud's own shapes; the pure classification of the clouds' codes decides capacity and
quota from other failures). The work holds the pool like any decision (``lease.PoolHold``), after a fresh read: two
replicas, or a decision racing the reconciler, never record one shortfall twice.
"""
from __future__ import annotations

import logging
import uuid
from typing import Callable

from autoscaler.engine.parts import Parts
from autoscaler.pool.door import Door, changed, short_note
from autoscaler.engine.fallback import signal_for_rest
from autoscaler.models import Action, CloudStatus, Decision, Outcome, PoolSpec, PoolState, Shortfall, Signal, Source
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from providers import NodePoolProvider, ProviderError

log = logging.getLogger(__name__)


def check(parts: Parts, spec: PoolSpec, now: float, seen: Shortfall | None = None) -> Decision | None:
    """Record the pool's shortfall while holding it, if the cloud still reports one (or ``seen``: one the cluster
    showed, which the cloud does not report); None when there is none (or the pool is held by another decision: the
    next tick looks again). The give-back is asked through the door, which counts the ``no_capacity`` of a refusal;
    the shortfall's own is counted here."""
    hold, provider = parts.hold, parts.providers[spec.name]
    held = hold.take(spec.name, hold.owner(f"shortage:{uuid.uuid4().hex}"), hold.deadline())
    if held is None:
        return None
    with held:
        state = held.state
        try:
            cloud = provider.status(state.tracked(), now)
        except ProviderError:
            cloud = CloudStatus(current=None)
        short = cloud.shortfall or (seen if seen is not None and cloud.current == seen.asked else None)
        if short is None or short.undelivered <= 0 or _already_told(state, short, now):
            return None
        decision, change = _give_back(parts.door, provider, spec, state, cloud, short, now)
        recorded = held.record(decision, Source.RECONCILE.value, [], now, change)
    if parts.metrics is not None:
        parts.metrics.no_capacity(spec.name, short.code)
    log.info("no_capacity pool=%s code=%s asked=%d delivered=%d", spec.name, short.code, short.asked,
             short.delivered)
    return recorded


def _already_told(state: PoolState, short: Shortfall, now: float) -> bool:
    """A shortfall the cloud keeps reporting (one it does not let us give back) is recorded once per short mark."""
    return not short.give_back and state.short_until is not None and state.short_until > now


def _give_back(door: Door, provider: NodePoolProvider, spec: PoolSpec, state: PoolState, cloud: CloudStatus,
               short: Shortfall, now: float) -> tuple[Decision, PoolChange]:
    """Ask the cloud for what it delivered (cluster-autoscaler's ``DecreaseTargetSize``) where it allows it and the
    pool may change (not paused, not dry-run); the decision and the pool's change (the short mark) to record."""
    kind = "quota" if short.quota else "capacity"
    details = {"code": short.code, "message": redact_text(short.message), "asked": short.asked,
               "delivered": short.delivered, "kind": kind}
    to, note = short.asked, ""
    if not short.give_back:
        note = "the cloud keeps the asked size (it cannot be given back)"
    elif state.paused:
        note = "paused: the asked size is left as it is"
    elif spec.dry_run:
        note = "dry run: would give the undelivered size back"
    else:
        try:
            to = door.scale(spec, provider, short.asked, short.delivered, now, cloud)
            note = f"asked size given back: {short.asked} -> {to}"
        except ProviderError as exc:
            note = f"giving the undelivered size back failed: {redact_text(exc.message)}"
            details["give_back_error"] = exc.shown_code
    until = now + spec.short_for
    reason = (f"the cloud accepted {short.asked} node(s) and delivered {short.delivered} ({kind}: {short.code}: "
              f"{redact_text(short.message)}); {note}; {short_note(spec)}")
    change = PoolChange(at=now, short_until=until, short_reason=f"{short.code}: {redact_text(short.message)}"[:500],
                        tracked_count=changed(provider, now, to).tracked_count if to != short.asked else None)
    return Decision(spec.name, Action.SCALE_OUT, Outcome.NO_CAPACITY, short.asked, to, reason,
                    details=details), change


def fall_back(handle: Callable[[Signal], Decision], spec: PoolSpec, short: Decision) -> Decision | None:
    """Ask the pool's group for what the pool did not deliver (the group's choice passes the short pool over)."""
    asked, delivered = short.details.get("asked"), short.details.get("delivered")
    if not spec.group or not isinstance(asked, int) or not isinstance(delivered, int) or asked <= delivered:
        return None
    return handle(signal_for_rest(spec, short, Source.RECONCILE))

