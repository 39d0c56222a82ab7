"""Sizing by the alert's value. Pure: no I/O, no clock.

Proportional mode, the HPA formula: desired = ceil(ready x value / target), ``ready`` being the nodes not in flight.
Demand mode (scale-out): the value is unmet demand in GPUs; target = current - in flight + ceil(value / gpus per
node), never below current, so nodes already booting for the same demand are not asked for twice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from autoscaler.models import Action, Mode, Outcome, PoolSpec, Signal

MAX_NODES = 1e9  # the formula's result is capped here before rounding (the pool's max clamps it further)
EPSILON = 1e-9  # 2 x 70 / 70 must stay 2, not become 3 through float error


@dataclass(frozen=True)
class Proposal:
    """What the formula asks for: a target, a reason to change nothing, or a fall back to the fixed step."""

    target: int | None  # None with skip=None: use the fixed step (``how`` says why)
    how: str
    details: dict[str, Any] = field(default_factory=dict)
    skip: Outcome | None = None


def _value_problem(action: Action, value: float | None, current: int, why: str) -> str:
    if value is None or not math.isfinite(value):
        return f"the alert's value {why}" if why else "the alert carried no usable value"
    if value < 0:
        return f"the alert's value {value:g} is negative"
    if action is Action.SCALE_OUT and current == 0:
        return "no running node to scale from"
    return ""


def _limited(policy_max_step: int | None, current: int, target: int, how: str) -> tuple[int, str]:
    if policy_max_step is not None and abs(target - current) > policy_max_step:
        target = current + policy_max_step if target > current else current - policy_max_step
        how += f", limited by max_step {policy_max_step} to {target}"
    return target, how


def demand(spec: PoolSpec, value: float | None, current: int, in_flight: int, why: str = "") -> Proposal:
    """Demand mode: enough nodes for ``value`` GPUs of unmet demand, counting the nodes already in flight."""
    in_flight = max(0, min(in_flight, current))
    base: dict[str, Any] = {"mode": "demand", "value": value, "in_flight": in_flight}
    problem = _value_problem(Action.SCALE_OUT, value, 1, why)
    if problem:
        return Proposal(None, f"demand mode, but {problem}: fixed step instead", {**base, "fallback": "step"})
    assert value is not None
    per = spec.gpus_per_node or 1  # the config requires it with demand mode
    needed = math.ceil(value / per - EPSILON)
    raw = current - in_flight + needed
    formula = f"{current} - {in_flight} in flight + ceil({value:g} GPUs / {per}) = {raw}"
    details = {**base, "gpus_per_node": per, "formula": formula, "desired": raw}
    if raw <= current:
        covered = f"{in_flight} node(s) in flight already cover it" if in_flight else "nothing is waiting"
        return Proposal(None, f"demand of {value:g} GPUs needs no new node: {covered} ({formula})", details,
                        Outcome.SKIPPED_LIMIT)
    how = f"demand: {formula}"
    clamped = min(spec.max, raw)
    if clamped != raw:
        how += f", clamped to max {clamped}"
    target, how = _limited(spec.scale_out.max_step, current, clamped, how)
    details["result"] = target
    return Proposal(target, how, details)


def _stabilized(recommendation: int, recent: Sequence[tuple[float, int]], now: float, window: float) -> int:
    """The highest recommendation within the window, this one included (the HPA's scale-down rule)."""
    inside = [d for t, d in recent if now - window <= t <= now]
    return max([recommendation, *inside])


def propose(signal: Signal, spec: PoolSpec, current: int, recent: Sequence[tuple[float, int]],
            now: float, in_flight: int = 0) -> Proposal | None:
    """The target sized by the alert's value; None when the pool's direction is in step mode.

    ``current`` is the count the cloud has asked for; ``in_flight`` of them are not ready yet.
    """
    action = signal.action
    if signal.target is not None or action is None:
        return None
    policy = spec.direction(action)
    if policy.mode == Mode.DEMAND and action is Action.SCALE_OUT:
        return demand(spec, signal.value, current, in_flight, signal.value_problem)
    if policy.mode != Mode.PROPORTIONAL:
        return None
    in_flight = max(0, min(in_flight, current))
    ready = current - in_flight
    if action is Action.SCALE_OUT and ready == 0 and in_flight and _value_problem(action, signal.value, 1, "") == "":
        return Proposal(None, f"proportional mode: no node is ready yet and {in_flight} in flight; waiting for them",
                        {"mode": "proportional", "value": signal.value, "in_flight": in_flight},
                        Outcome.SKIPPED_LIMIT)
    problem = _value_problem(action, signal.value, ready, signal.value_problem)
    if problem:
        return Proposal(None, f"proportional mode, but {problem}: fixed step instead",
                        {"mode": "proportional", "value": signal.value, "fallback": "step"})
    assert signal.value is not None
    value, goal = signal.value, policy.target_utilization
    ratio = value / goal
    raw = max(0, math.ceil(min(ready * ratio, MAX_NODES) - EPSILON))  # a huge value: inf, and no ceil of it
    formula = f"ceil({ready} x {value:g} / {goal:g}) = {raw}"
    if in_flight:
        formula = f"ceil({ready} ready x {value:g} / {goal:g}) = {raw} ({in_flight} in flight)"
    details: dict[str, Any] = {"mode": "proportional", "value": value, "target_utilization": goal,
                               "formula": formula, "desired": raw}
    if abs(ratio - 1) <= policy.tolerance:
        details["recommendation"] = current
        return Proposal(
            None, f"value {value:g} is within the {policy.tolerance:.0%} tolerance of the target {goal:g}: "
                  f"no change ({formula})", details, Outcome.SKIPPED_LIMIT)
    clamped = max(spec.min, min(spec.max, raw))
    details["recommendation"] = clamped
    if (action is Action.SCALE_OUT) != (value > goal):
        words = ("a scale-out alert never scales in: value {v} is not above" if action is Action.SCALE_OUT
                 else "a scale-in alert never scales out: value {v} is not below")
        return Proposal(None, f"{words.format(v=f'{value:g}')} the target {goal:g} ({formula}, current {current})",
                        details, Outcome.SKIPPED_LIMIT)
    bound = spec.max if action is Action.SCALE_OUT else spec.min
    if action is Action.SCALE_OUT and in_flight and clamped <= current:
        return Proposal(None, f"the formula's {clamped} nodes are already asked for: {current} requested, "
                              f"{in_flight} of them in flight ({formula})", details, Outcome.SKIPPED_LIMIT)
    if clamped == current and current != bound:
        return Proposal(None, f"the formula keeps the pool at {current} nodes ({formula})", details,
                        Outcome.SKIPPED_LIMIT)
    how = f"proportional: {formula}"
    if clamped != raw:
        how += f", clamped to {'max' if clamped == spec.max else 'min'} {clamped}"
    target = clamped
    if action is Action.SCALE_IN and clamped < current:
        window = policy.stabilization_window
        target = _stabilized(clamped, recent, now, window)
        details["stabilized"] = target
        if target >= current:
            return Proposal(None, f"scale-in held by the {window:.0f}s stabilization window: the highest "
                                  f"recommendation in it is {target} nodes, not below current {current} "
                                  f"({formula})", details, Outcome.SKIPPED_COOLDOWN)
        if target != clamped:
            how += f", stabilized to {target} (highest in {window:.0f}s)"
    target, how = _limited(policy.max_step, current, target, how)
    details["result"] = target
    return Proposal(target, how, details)
