"""Which pool of a fallback group a decision goes to (pure: no I/O, no clock; ``now`` is passed in).

A scale-out goes to the first pool, in the group's order of preference, that can take it: not paused, not short of
capacity, not backing off after failures, not at its max. A scale-in takes from the last pool that has nodes above
its min, so a group drifts back to its preferred pools once they deliver again (GKE ComputeClass's "move back",
cluster-autoscaler's expanders the other way round). A pool the sender's credential may not act on is never chosen:
a group does not widen a credential limited to some pools.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from autoscaler.models import Action


OUT_OF_SCOPE = "outside the credential's pools"


@dataclass(frozen=True)
class Member:
    """What the choice reads of one pool of a group."""

    name: str
    current: int | None  # None: the pool's count is not known (its cloud could not be read)
    min: int
    max: int
    paused: bool = False
    short_until: float | None = None
    short_reason: str = ""
    backoff_until: float | None = None
    in_scope: bool = True  # False: the credential that sent the signal may not act on this pool
    gang: str = ""  # an atomic scale-out waiting on the pool (its id): a plain scale-out waits for it to settle


@dataclass(frozen=True)
class Choice:
    """The pools that may act, most preferred first, and each pool passed over with why."""

    candidates: tuple[str, ...]
    passed: tuple[tuple[str, str], ...]

    @property
    def first(self) -> str | None:
        return self.candidates[0] if self.candidates else None

    def why_none(self) -> str:
        """A sentence for a decision no pool of the group could take."""
        return "; ".join(f"{name}: {why}" for name, why in self.passed) or "the group has no pools"


def _passed_over(member: Member, action: Action, now: float) -> str:
    """Why ``member`` cannot take the action now ("" when it can)."""
    if not member.in_scope:
        return OUT_OF_SCOPE
    if member.paused:
        return "paused"
    if member.current is None:
        return "its count is unknown (the cloud could not be read)"
    if action is Action.SCALE_OUT:
        if member.short_until is not None and member.short_until > now:
            why = f": {member.short_reason}" if member.short_reason else ""
            return f"short of capacity for another {member.short_until - now:.0f}s{why}"
        if member.backoff_until is not None and member.backoff_until > now:
            return f"backing off after failures for another {member.backoff_until - now:.0f}s"
        if member.gang:
            return f"an atomic scale-out waits on it (gang {member.gang})"
        if member.current >= member.max:
            return f"at max ({member.max})"
        return ""
    if member.current <= member.min:
        return f"at min ({member.min})"
    return ""


def choose(members: Sequence[Member], action: Action, now: float) -> Choice:
    """Scale-out: the group's order; scale-in: the reverse (least preferred gives nodes back first)."""
    ordered = list(members) if action is Action.SCALE_OUT else list(reversed(members))
    candidates, passed = [], []
    for member in ordered:
        why = _passed_over(member, action, now)
        if why:
            passed.append((member.name, why))
        else:
            candidates.append(member.name)
    return Choice(tuple(candidates), tuple(passed))
