"""A signal for a fallback group becomes a signal for one of its pools (``autoscaler/decide/groups.py`` chooses,
purely).

Each member is read as a decision would read it: its stored state (paused, backing off, short of capacity) and its
cloud's count now; a pool whose cloud reports nodes it could not deliver, not yet recorded by the reconciler, is
passed over as short already. The chosen pool's decision then runs as any other (its lease, a fresh read, its
cooldown), keyed for dedup by the group: two replicas that chose different pools for one alert still claim one key.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from autoscaler.config.load import Settings
from autoscaler.decide.groups import OUT_OF_SCOPE, Member, choose
from autoscaler.models import Action, Decision, Mode, Outcome, PoolSpec, Signal, Source
from autoscaler.decide.proportional import propose
from autoscaler.pool import stamps
from autoscaler.store import Store
from providers import NodePoolProvider, ProviderError


def member(store: Store, provider: NodePoolProvider, spec: PoolSpec, now: float) -> Member:
    """What the group's choice reads of one pool now."""
    state = stamps.read(store, spec, now)
    short_until, short_reason = state.short_until, state.short_reason
    try:
        cloud = provider.status(state.tracked(), now)
        current = cloud.current
        if cloud.shortfall is not None and cloud.shortfall.undelivered > 0:
            short_until, short_reason = max(short_until or 0.0, now + 1), cloud.shortfall.code
    except ProviderError:
        current = None
    gangs = store.gangs(spec.name)
    return Member(spec.name, current, spec.min, spec.max, paused=state.paused, short_until=short_until,
                  short_reason=short_reason, backoff_until=state.backoff_until, gang=gangs[0].id if gangs else "")


def route(settings: Settings, store: Store, providers: Mapping[str, NodePoolProvider], signal: Signal,
          now: float) -> Signal | Decision:
    """The signal for the pool of group ``signal.pool`` that should act, or the decision when none can."""
    group = signal.pool
    specs = [settings.pools[name] for name in settings.groups[group]]
    action = signal.action or Action.SCALE_OUT
    members = [replace(member(store, providers[spec.name], spec, now),
                       in_scope=signal.within is None or spec.name in signal.within) for spec in specs]
    choice = choose(members, action, now)
    chosen = choice.first
    if chosen is None:
        whys = [why for _, why in choice.passed if why != OUT_OF_SCOPE]
        everyone_paused = bool(whys) and all(why == "paused" for why in whys)
        ours = [m.name for m in members if m.in_scope] or [specs[0].name]  # the event goes to a pool it may act on
        first = settings.pools[ours[0] if action is Action.SCALE_OUT else ours[-1]]
        outcome = Outcome.SKIPPED_PAUSED if everyone_paused else Outcome.SKIPPED_LIMIT
        reason = f"{signal.reason + ': ' if signal.reason else ''}no pool of group {group} can take it: " \
                 f"{choice.why_none()}"
        return Decision(first.name, action, outcome, None, None, reason,
                        details={"group": group, "passed": dict(choice.passed)})
    order = [m.name for m in (members if action is Action.SCALE_OUT else reversed(members))]
    before = set(order[:order.index(chosen)])
    passed = "; ".join(f"{name} passed over: {why}" for name, why in choice.passed if name in before)
    reason = f"{signal.reason} (group {group}: {chosen}{', ' + passed if passed else ''})"
    out = replace(signal, pool=chosen, group=group, reason=reason)
    current = next(m.current for m in members if m.name == chosen)
    assert current is not None  # a pool whose count is unknown is never chosen
    if signal.fallback and signal.step and signal.target is None:
        return replace(out, step=None, target=current + signal.step)  # the missing nodes, in any mode
    taken = _proportional_scale_in(out, specs, members, now)
    return out if taken is None else replace(out, target=max(settings.pools[chosen].min, current - taken))


def _proportional_scale_in(signal: Signal, specs: list[PoolSpec], members: list[Member], now: float) -> int | None:
    """How many nodes a proportional scale-in takes from the group (the formula over the group's ready count, its
    min and max the sums of its pools'); None when the signal is not one, or the formula keeps the group as it is
    (the chosen pool's own decision then says why). The stabilization window is the pool's, not the group's."""
    spec = next(s for s in specs if s.name == signal.pool)
    if signal.action is not Action.SCALE_IN or spec.scale_in.mode is not Mode.PROPORTIONAL or signal.target is not None:
        return None
    total = sum(m.current or 0 for m in members)
    group = replace(spec, min=sum(s.min for s in specs), max=sum(s.max for s in specs))
    proposal = propose(signal, group, total, [], now)
    if proposal is None or proposal.target is None or proposal.target >= total:
        return None
    return total - proposal.target


def signal_for_rest(spec: PoolSpec, short: Decision, source: Source,
                    within: frozenset[str] | None = None) -> Signal:
    """The signal that asks the pool's group for what the pool did not deliver (no alerts: the first decision's
    event keeps them, and its dedup keys are claimed); ``within``: the first signal's credential's pools."""
    missing = int(short.details["asked"]) - int(short.details["delivered"])
    return Signal(pool=spec.group, action=Action.SCALE_OUT, source=source, step=missing, force=True, fallback=True,
                  within=within,
                  reason=f"{spec.name} could not deliver {missing} node(s) ({short.details.get('code')}); asked "
                         f"of group {spec.group}")
