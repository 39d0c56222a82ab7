"""Stamps from ahead of this clock: a pool's last scale-out and scale-in times, its failure backoff and its capacity
pass-over (``short_until``) are written on the clock of the replica that decided. One that reads later than this
process's clock (a replica whose clock runs ahead wrote it, or this host's clock stepped back: NTP) would hold its
cooldown, backoff or pass-over for its whole length *plus* the difference: a remaining time shown at most its length
(``policy.cooldown_remaining``) still never ends until the clocks meet. So whoever reads the pool to decide on it
brings such a stamp back: a last scale time to now (its cooldown then runs its whole length from now, never more), a
backoff to now plus the length its failures set, a pass-over to now plus ``short_for``. A stamp behind this clock
(the writer's clock late) is left: it can only shorten the wait, as with cooldowns (docs/replicas.md)."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from autoscaler.decide.policy import backoff_seconds
from autoscaler.models import Action, PoolSpec, PoolState
from autoscaler.store import PoolChange, PoolStore

log = logging.getLogger(__name__)
#: Seconds a stamp may read ahead of this clock before it is brought back (clocks this close count as agreeing).
TOLERANCE = 1.0


def pulled_back(state: PoolState, now: float,
                short_for: float | None = None) -> tuple[tuple[PoolChange, ...], PoolState]:
    """The changes that bring the state's stamps ahead of ``now`` back (none when every stamp is within
    TOLERANCE of it), and the state as they leave it. ``short_for``: the pool's pass-over length (None: its
    ``short_until`` is left as it is)."""
    changes: list[PoolChange] = []
    fields: dict[str, Any] = {}
    for action, name in ((Action.SCALE_OUT, "last_scale_out_at"), (Action.SCALE_IN, "last_scale_in_at")):
        at = getattr(state, name)
        if at is not None and at > now + TOLERANCE:
            changes.append(PoolChange(at=now, acted=action))
            fields[name] = now
    if state.backoff_until is not None and state.failures:
        longest = now + backoff_seconds(state.failures)
        if state.backoff_until > longest + TOLERANCE:
            changes.append(PoolChange(failures=state.failures, backoff_until=longest))
            fields["backoff_until"] = longest
    if state.short_until is not None and short_for is not None:
        longest = now + short_for
        if state.short_until > longest + TOLERANCE:
            changes.append(PoolChange(short_until=longest, short_reason=state.short_reason))
            fields["short_until"] = longest
    return tuple(changes), replace(state, **fields) if fields else state


def read(store: PoolStore, spec: PoolSpec, now: float) -> PoolState:
    """The pool's stored state, read to decide on it: with its stamps ahead of ``now`` brought back (``settled``)."""
    return settled(store, spec.name, store.pool(spec.name), now, spec.short_for)


def settled(store: PoolStore, pool: str, state: PoolState, now: float, short_for: float | None = None) -> PoolState:
    """``state`` with its stamps ahead of ``now`` brought back, in the store too (see the module)."""
    changes, fixed = pulled_back(state, now, short_for)
    if not changes:
        return state
    for change in changes:
        store.update_pool(pool, None, change)
    ahead = max(getattr(state, name) - getattr(fixed, name) for name in
                ("last_scale_out_at", "last_scale_in_at", "backoff_until", "short_until")
                if getattr(state, name) is not None and getattr(fixed, name) is not None)
    log.warning("pool %s: its stored times read up to %.0fs ahead of this clock (a replica's clock ahead, or this "
                "one stepped back): brought back, so no cooldown, backoff or pass-over lasts longer than its length "
                "(keep the hosts' clocks in sync: NTP)", pool, ahead)
    return fixed
