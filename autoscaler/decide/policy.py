"""The decision: a pure function of (signal, pool spec, pool state, cloud status, now). No I/O, no clock."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from autoscaler.decide.headroom import Floor, floor as headroom_floor
from autoscaler.models import (Action, CloudLimits, CloudStatus, Decision, Outcome, PoolFacts, PoolSpec, PoolState,
                               Signal)
from autoscaler.decide.proportional import propose

BACKOFF_FIRST = 60.0
BACKOFF_MAX = 900.0


def backoff_seconds(failures: int) -> float:
    """1 min after the first consecutive failure, doubling with each one, at most 15 min."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX)


def _left(since: float | None, length: float, now: float) -> float:
    """Seconds left of a wait of ``length`` that began at ``since`` (0 when none), never more than ``length``:
    a wall clock stepped back (NTP), or a replica's clock behind the one that stamped ``since``, cannot stretch it."""
    return 0.0 if since is None else max(0.0, min(length, since + length - now))


def cooldown_remaining(spec: PoolSpec, state: PoolState, now: float) -> dict[str, float]:
    """Seconds until each direction may act again (0 when it may act now; at most its configured length)."""
    out = _left(state.last_scale_out_at, spec.scale_out.cooldown, now)
    inn = max(_left(state.last_scale_in_at, spec.scale_in.cooldown, now),
              _left(state.last_scale_out_at, spec.scale_in.delay_after_scale_out, now))
    return {"scale_out": out, "scale_in": inn}


def _held(spec: PoolSpec, state: PoolState, now: float, action: Action, remaining: float) -> str:
    """Why a direction waits: its cooldown, or for a scale-in held longer by the last scale-out, that delay."""
    if action is Action.SCALE_IN and state.last_scale_out_at is not None:
        own = _left(state.last_scale_in_at, spec.scale_in.cooldown, now)
        if _left(state.last_scale_out_at, spec.scale_in.delay_after_scale_out, now) > own:
            return f"scale in held after the last scale-out (delay_after_scale_out): {remaining:.0f}s left"
    return f"{_words(action)} cooldown: {remaining:.0f}s left"


def _words(action: Action) -> str:
    return "scale out" if action is Action.SCALE_OUT else "scale in"


def _desired(signal: Signal, spec: PoolSpec, current: int) -> tuple[Action | None, int, str]:
    """(action, unclamped target, how it was computed)."""
    if signal.target is not None:
        action = Action.SCALE_OUT if signal.target > current else Action.SCALE_IN if signal.target < current else None
        return action, signal.target, f"target {signal.target}"
    assert signal.action is not None
    step = signal.step or spec.direction(signal.action).step
    sign = 1 if signal.action is Action.SCALE_OUT else -1
    return signal.action, current + sign * step, f"step {step}"


def _limit(spec: PoolSpec, action: Action | None, current: int, desired: int) -> tuple[int, str]:
    """The target clamped to [min, max] and, if that leaves nothing to do, why."""
    target = max(spec.min, min(spec.max, desired))
    if action is None or target == current:
        if action is None:
            return current, f"already at the requested size {current}"
        bound = f"max ({spec.max})" if action is Action.SCALE_OUT else f"min ({spec.min})"
        return current, f"already at {bound}: {current} nodes"
    if (action is Action.SCALE_OUT) != (target > current):
        bound = f"max ({spec.max})" if action is Action.SCALE_OUT else f"min ({spec.min})"
        return current, f"{current} nodes is already beyond {bound}; not moving the other way"
    return target, ""


def _in_multiples(limits: CloudLimits, spec: PoolSpec, action: Action | None, current: int,
                  target: int) -> tuple[int, str]:
    """The target moved to a multiple of ``limits.multiple_of`` (GKE: the zone count) in the action's direction,
    or else the other way, as long as it stays inside both bounds and still moves the right way; unchanged (and so
    refused by ``limits.refuses``) when no multiple qualifies."""
    step = limits.multiple_of
    if step <= 1 or target % step == 0 or action is None:
        return target, ""
    up, down = -(-target // step) * step, target // step * step
    for candidate in ((up, down) if action is Action.SCALE_OUT else (down, up)):
        inside = spec.min <= candidate <= spec.max and limits.low <= candidate <= limits.high
        if inside and (candidate > current if action is Action.SCALE_OUT else candidate < current):
            why = f": {limits.multiple_why}" if limits.multiple_why else ""
            return candidate, f", rounded from {target} to {candidate}, a multiple of {step}{why}"
    return target, ""


def _paused(spec: PoolSpec, state: PoolState, action: Action | None, current: int | None) -> Decision:
    why = f" ({state.pause_reason})" if state.pause_reason else ""
    return Decision(spec.name, action, Outcome.SKIPPED_PAUSED, current, current,
                    f"pool is paused{why}; resume it to scale")


def shortcut(signal: Signal, spec: PoolSpec, state: PoolState, now: float, current: int | None) -> Decision | None:
    """The plan when the stored state alone settles it, whatever the cloud would say: a paused pool, or a step-mode
    alert inside its direction's cooldown (which only ever grows). None: ``decide`` needs the cloud's status.

    ``current`` is the last count known (the tracked count, or the last event's), shown in from/to only.
    """
    action = signal.action
    if action is None or action is Action.REPAIR or signal.target is not None:
        return None
    if state.paused:
        return _paused(spec, state, action, current)
    if signal.force or spec.proportional:
        return None  # proportional records a recommendation with every decision: it needs the cloud's count
    if state.backoff_until is not None and now < state.backoff_until:
        return None
    remaining = cooldown_remaining(spec, state, now)[action.value]
    if remaining <= 0:
        return None
    return Decision(spec.name, action, Outcome.SKIPPED_COOLDOWN, current, current,
                    _held(spec, state, now, action, remaining), details={"cloud": "not read: the cooldown settles it"})


def _with_facts(plan: Decision, facts: PoolFacts) -> Decision:
    """Every decision made with the cloud's count says what was in flight and which floor held."""
    extra: dict[str, Any] = {"in_flight": facts.in_flight}
    if facts.in_flight_how:
        extra["in_flight_how"] = facts.in_flight_how
    if facts.floor is not None and facts.floor_how:
        extra["floor"] = facts.floor
        extra["floor_how"] = facts.floor_how
    return replace(plan, details={**extra, **plan.details})


def decide(signal: Signal, spec: PoolSpec, state: PoolState, cloud: CloudStatus, now: float,
           recent: Sequence[tuple[float, int]] = (), facts: PoolFacts = PoolFacts(), *,
           named_scale_in: bool = False) -> Decision:
    """Decide what one signal does to one pool (``recent``: proportional recommendations as (time, nodes);
    ``facts``: nodes in flight and the effective min now, a schedule's floor when one is open;
    ``named_scale_in``: a scale-in removes named nodes, so the cloud's resize granularity does not apply)."""
    if signal.action is Action.REPAIR and signal.target is None:  # the engine hands these to autoscaler/repair/start.py
        return Decision(spec.name, Action.REPAIR, Outcome.UNROUTED, None, None, "a repair names a node, not a size: "
                        "it is not decided here")
    if facts.floor is not None and facts.floor > spec.min:
        spec = replace(spec, min=min(facts.floor, spec.max))
    room = headroom_floor(signal, spec, cloud.current, facts) if cloud.current is not None else None
    if room is not None and signal.action is Action.SCALE_IN:
        room = _stabilized_floor(room, spec, recent, now)
    return _with_facts(_decide(signal, spec, state, cloud, now, recent, facts.in_flight, named_scale_in, room),
                       facts)


def _stabilized_floor(room: Floor, spec: PoolSpec, recent: Sequence[tuple[float, int]], now: float) -> Floor:
    """A scale-in's headroom floor held at the highest floor (or proportional recommendation) of the last
    ``scale_in.stabilization_window``: the need that dipped a moment ago is back within minutes more often than not,
    and the reconciler's top-up would add again what this scale-in removed (a direction change each way)."""
    window = spec.scale_in.stabilization_window
    top = min(spec.max, max((nodes for at, nodes in recent if at >= now - window), default=0))
    if top <= room.nodes:
        return room
    return Floor(top, f"{room.how}; held at {top}, the highest in the {window:.0f}s stabilization window",
                 {**room.details, "headroom": {**room.details.get("headroom", {}), "floor": top,
                                               "stabilized_from": room.nodes}})


def _with_room(room: Floor | None, spec: PoolSpec, action: Action | None, current: int, desired: int,
               how: str) -> tuple[int, str, bool]:
    """The target raised to the headroom's floor where it is below it (a scale-out at most ``max_step`` above
    current), how, and whether the headroom shaped it."""
    if room is None or action is None or room.nodes <= desired:
        return desired, how, False
    lifted = room.nodes
    if action is Action.SCALE_OUT and spec.scale_out.max_step is not None:
        lifted = min(lifted, current + spec.scale_out.max_step)
    return max(desired, lifted), f"{how}; raised to {lifted} by the {room.how}", True


def _decide(signal: Signal, spec: PoolSpec, state: PoolState, cloud: CloudStatus, now: float,
            recent: Sequence[tuple[float, int]], in_flight: int, named_scale_in: bool,
            room: Floor | None = None) -> Decision:
    current = cloud.current
    action = signal.action
    if state.paused:
        return _paused(spec, state, action, current)
    if cloud.busy:
        detail = f": {cloud.detail}" if cloud.detail else ""
        return Decision(spec.name, action, Outcome.SKIPPED_BUSY, current, current,
                    f"the cloud is still working on an earlier change{detail}")
    if not signal.force and state.backoff_until is not None and now < state.backoff_until:
        wait = state.backoff_until - now
        return Decision(spec.name, action, Outcome.SKIPPED_BACKOFF, current, current,
                    f"backing off for {wait:.0f}s more after {state.failures} consecutive failure(s)",
                    retry_after=wait)
    if current is None:
        return Decision(spec.name, action, Outcome.FAILED, None, None,
                    "the pool's current size is unknown; set it with PUT /api/v1/pools/{pool}/count")
    proposal = propose(signal, spec, current, recent, now, in_flight)
    details = {**(proposal.details if proposal else {}), **(room.details if room else {})}
    lifts = room is not None and action is Action.SCALE_OUT and room.nodes > current
    if proposal is not None and proposal.skip is not None and not (lifts and proposal.skip is Outcome.SKIPPED_LIMIT):
        return Decision(spec.name, action, proposal.skip, current, current, proposal.how, details=details)
    if proposal is not None and proposal.skip is not None:  # the formula asks for nothing; the headroom does
        desired, how = current, proposal.how
    else:
        action, desired, how = _desired(signal, spec, current)
        if proposal is not None:
            desired, how = (proposal.target, proposal.how) if proposal.target is not None else (
                desired, f"{how}; {proposal.how}")
    desired, how, shaped = _with_room(room, spec, action, current, desired, how)
    if shaped and action is Action.SCALE_IN and desired >= current:
        assert room is not None
        return Decision(spec.name, action, Outcome.SKIPPED_LIMIT, current, current,
                        f"scale-in stops at the headroom: {room.how}, not below current {current}", details=details)
    target, limited = _limit(spec, action, current, desired)
    rounded = ""
    if not limited and cloud.limits is not None:
        limits = cloud.limits
        if named_scale_in and action is Action.SCALE_IN:
            limits = replace(limits, multiple_of=1)  # GKE's deleteInstances takes any number of nodes
        target, rounded = _in_multiples(limits, spec, action, current, target)
        limited = limits.refuses(target)
    if limited:
        return Decision(spec.name, action, Outcome.SKIPPED_LIMIT, current, current, limited, details=details)
    assert action is not None
    if not signal.force and not signal.floor:  # a floor is a limit, like min: no cooldown holds it back
        remaining = cooldown_remaining(spec, state, now)[action.value]
        if remaining > 0:
            return Decision(spec.name, action, Outcome.SKIPPED_COOLDOWN, current, current,
                            _held(spec, state, now, action, remaining), retry_after=None, details=details)
    clamp_note = rounded or (f", clamped to {'max' if target == spec.max else 'min'} {target}"
                             if target != desired else "")
    if spec.dry_run:
        return Decision(spec.name, action, Outcome.DRY_RUN, current, target,
                    f"dry run: would {_words(action)} {current} -> {target} ({how}{clamp_note})", details=details)
    forced = ", forced" if signal.force else ""
    return Decision(spec.name, action, Outcome.SCALED, current, target,
                f"{_words(action)} {current} -> {target} ({how}{clamp_note}{forced})", details=details)
