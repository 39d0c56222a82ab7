"""The searched days pooled: the tuning span's whole days rearranged so that every prefix of a day is a day made of
a slice of each of them, for the search's first rungs (tune.py).

Off by default (``replay --tune --pooled``): measured on the bench weeks it chose worse settings, not better
(BENCHMARKS.md "Round 11"). Why it was tried: successive halving screens many candidates on a short prefix of the
history. With
the plain prefix that prefix is the first day, so a candidate survives the first rung by how it does on day 1 alone,
against a budget meant for the span's average day: a busy first day throws away settings that hold on the span,
a quiet one keeps settings that break on the others. A pooled day is a stratified sample of the span instead: its
hours come from every searched day in turn, each at its own time of day, so the screen's figures estimate the
average day, as the final cut judges it.

The layout is a Latin square: with D whole days, cut each day into D slices of the day (the same hours in every
day); pooled day ``s`` takes its ``d``-th slice from day ``(d + s) mod D``. The D pooled days hold every minute of the
D days, each at its own minute of the day (schedules and busy-hours windows see the hours they would).

At a junction the demand would jump from one day's level to another's (on the training week by up to 12 nodes, more
than any minute of the history moves): a surge that never happened, which a lean candidate pays in saturated minutes
(four junctions a pooled day could spend the inference budget alone). So each slice is preceded by the WARM minutes
that preceded it in the history, in place of the previous slice's last ones, and those minutes are not scored
(``scored``): the pool meets each slice as the history left it, the jump falls where nothing is counted.
"""
from __future__ import annotations

from functools import lru_cache

from autoscaler.replay.trace import Trace

DAY = 1440
NAME = "pooled"  # the copy's name among the worker processes' traces (tune.make_pool)
WARM = 60  # minutes before each slice replayed as the history had them, not scored (at most a third of a slice)


def slices(days: int) -> list[tuple[int, int]]:
    """The D slices of a day, as (first minute, end) within the day: equal, the last taking the remainder."""
    size = DAY // days
    return [(d * size, DAY if d == days - 1 else (d + 1) * size) for d in range(days)]


def warm(days: int) -> int:
    """The warm-up before each slice: WARM minutes, at most a third of a slice."""
    return min(WARM, DAY // days // 3)


def pooled_order(days: int) -> list[int]:
    """Minute indexes of the span (``days`` whole days from its start) in pooled order: pooled day 0, 1, ...; the
    ``warm(days)`` minutes before each slice (but the first) are the ones before it in the history."""
    out: list[int] = []
    cuts = slices(days)
    for shift in range(days):
        for d, (first, end) in enumerate(cuts):
            day = (d + shift) % days
            out.extend(range(day * DAY + first, day * DAY + end))
    lead = warm(days)
    for start in junctions(days):
        out[start - lead:start] = range(out[start] - lead, out[start])
    return out


def junctions(days: int) -> list[int]:
    """Where a slice starts in the pooled order (the first excepted): each pooled day's slices."""
    return [shift * DAY + first for shift in range(days) for first, _ in slices(days)][1:]


@lru_cache(maxsize=8)
def scored(days: int) -> tuple[bool, ...]:
    """Which minutes of the pooled order count (False: a slice's warm-up)."""
    out = [True] * (days * DAY)
    lead = warm(days)
    for start in junctions(days):
        out[start - lead:start] = [False] * lead
    return tuple(out)


def pooled(trace: Trace, minutes: int) -> Trace | None:
    """The first ``minutes`` of the trace's whole days pooled (see the module's doc); None with fewer than two whole
    days (nothing to pool)."""
    days = min(minutes, len(trace.demand)) // DAY
    if days < 2:
        return None
    return Trace(trace.start, tuple(trace.demand[i] for i in pooled_order(days)))


__all__ = ["NAME", "WARM", "junctions", "pooled", "pooled_order", "scored", "slices", "warm"]
