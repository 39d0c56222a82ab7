"""Schedule windows that raise a pool's floor. Pure: ``now`` is passed in, no clock, no I/O.

A window opens at each time its five-field cron expression matches, in its IANA time zone (so ``0 8 * * 1-5`` in
Europe/Warsaw opens at 08:00 Warsaw time in winter and in summer), and stays open for ``duration`` of elapsed
time. DST: a start inside the hour skipped in spring happens at the first minute after it (03:00); a start inside
the hour repeated in autumn happens at both occurrences (the window stays open from the first one to ``duration``
after the second). Overlapping windows: the highest ``min`` wins; the pool's own ``min`` is the lowest floor.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]

from autoscaler.models import Headroom, PoolSpec, Schedule


def valid_cron(expression: str) -> bool:
    """Whether ``expression`` is a five-field cron expression croniter understands."""
    return len(expression.split()) == 5 and bool(croniter.is_valid(expression))


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def last_start(window: Schedule, now: float) -> float:
    """Unix time of the window's latest start at or before ``now``."""
    # croniter's get_prev excludes its start instant: ask from just after now, then make sure it is not after now.
    # The offset is added before the conversion: local arithmetic would lose ``fold`` (the repeated autumn hour).
    local = datetime.fromtimestamp(now + 0.001, tz=timezone.utc).astimezone(_zone(window.timezone))
    it = croniter(window.cron, local)
    start: datetime = it.get_prev(datetime)
    if start.timestamp() > now:
        start = it.get_prev(datetime)
    return float(start.timestamp())


def open_windows(spec: PoolSpec, now: float) -> list[tuple[Schedule, float]]:
    """The pool's windows open at ``now``, each with the time it opened."""
    out = []
    for window in spec.schedules:
        start = last_start(window, now)
        if now < start + window.duration:
            out.append((window, start))
    return out


def effective_min(spec: PoolSpec, now: float) -> tuple[int, str]:
    """The floor in force at ``now`` (never above ``max``) and why: the highest open window's min, else the pool's."""
    best: tuple[Schedule, float] | None = None
    for window, start in open_windows(spec, now):
        if window.min > spec.min and (best is None or window.min > best[0].min):
            best = (window, start)
    if best is None:
        return spec.min, ""
    window, start = best
    opened = datetime.fromtimestamp(start, tz=timezone.utc).astimezone(_zone(window.timezone))
    until = opened + timedelta(seconds=window.duration)
    how = (f"schedule {window.cron!r} ({window.timezone}) opened {opened.strftime('%Y-%m-%d %H:%M %Z')}, "
           f"min {window.min} until {until.strftime('%Y-%m-%d %H:%M %Z')}")
    return min(window.min, spec.max), how


def effective_headroom(spec: PoolSpec, now: float) -> tuple[Headroom | None, str]:
    """The headroom in force at ``now`` and why: the first open window (in the config's order) that sets one, else
    the pool's ``scale_out.headroom`` (and "")."""
    for window, start in open_windows(spec, now):
        if window.headroom is not None:
            opened = datetime.fromtimestamp(start, tz=timezone.utc).astimezone(_zone(window.timezone))
            return window.headroom, (f"schedule {window.cron!r} ({window.timezone}) opened "
                                     f"{opened.strftime('%Y-%m-%d %H:%M %Z')}")
    return spec.scale_out.headroom, ""
