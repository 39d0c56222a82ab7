"""Proportional mode, the HPA formula: desired = ceil(current x value / target). Pure: no I/O, no clock."""
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


def _stabilized(recommendation: int, recent: Sequence[tuple[float, int]], now: float, window: float) -> int:
    """The highest recommendation within the window, this one included (the HPA's scale-down rule)."""
    inside = [d for t, d in recent if now - window <= t <= now]
    return max([recommendation, *inside])


def propose(signal: Signal, spec: PoolSpec, current: int, recent: Sequence[tuple[float, int]],
            now: float) -> Proposal | None:
    """The proportional target for a signal; None when the pool's direction is in step mode."""
    action = signal.action
    if signal.target is not None or action is None:
        return None
    policy = spec.direction(action)
    if policy.mode != Mode.PROPORTIONAL:
        return None
    problem = _value_problem(action, signal.value, current, signal.value_problem)
    if problem:
        return Proposal(None, f"proportional mode, but {problem}: fixed step instead",
                        {"mode": "proportional", "value": signal.value, "fallback": "step"})
    assert signal.value is not None
    value, goal = signal.value, policy.target_utilization
    ratio = value / goal
    raw = max(0, math.ceil(min(current * ratio, MAX_NODES) - EPSILON))  # a huge value: inf, and no ceil of it
    formula = f"ceil({current} x {value:g} / {goal:g}) = {raw}"
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
    if policy.max_step is not None and abs(target - current) > policy.max_step:
        target = current + policy.max_step if target > current else current - policy.max_step
        how += f", limited by max_step {policy.max_step} to {target}"
    details["result"] = target
    return Proposal(target, how, details)
