"""Schedule windows that raise a pool's floor. Pure: ``now`` is passed in, no clock, no I/O.

A window opens at each time its five-field cron expression matches, in its IANA time zone (so ``0 8 * * 1-5`` in
Europe/Warsaw opens at 08:00 Warsaw time in winter and in summer), and stays open for ``duration`` of elapsed
time. DST: a start inside the hour skipped in spring happens at the first minute after it (03:00); a start inside
the hour repeated in autumn happens at both occurrences (the window stays open from the first one to ``duration``
after the second). Overlapping windows: the highest ``min`` wins; the pool's own ``min`` is the lowest floor.

A window whose starts cannot be computed (croniter finds none: ``0 0 30 2 *``; check-config refuses those it can
see, ``config.cron.starts_within``) is ignored, and said in the floor's reason: it never takes the tick, the API or
another pool down (``unusable`` lists them for the reconciler's log).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]

from autoscaler.models import Headroom, PoolSpec, Schedule


class ScheduleError(Exception):
    """The window's starts cannot be computed (croniter finds none)."""


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


#: The last start found for a UTC cron expression and the start after it: any ``now`` between the two has that last
#: start, without asking croniter again (about 0.1 ms a call: a replay asks at every decision). UTC only: a time zone
#: with DST can start twice in its repeated hour, which the start after would not say.
_KNOWN: dict[str, tuple[float, float]] = {}


def last_start(window: Schedule, now: float) -> float:
    """Unix time of the window's latest start at or before ``now``; ScheduleError when there is none to find."""
    utc = window.timezone == "UTC"
    known = _KNOWN.get(window.cron) if utc else None
    if known is not None and known[0] <= now < known[1]:
        return known[0]
    # croniter's get_prev excludes its start instant: ask from just after now, then make sure it is not after now.
    # The offset is added before the conversion: local arithmetic would lose ``fold`` (the repeated autumn hour).
    local = datetime.fromtimestamp(now + 0.001, tz=timezone.utc).astimezone(_zone(window.timezone))
    try:
        it = croniter(window.cron, local)
        start: datetime = it.get_prev(datetime)
        if start.timestamp() > now:
            start = it.get_prev(datetime)
        after = croniter(window.cron, start).get_next(datetime).timestamp() if utc else None
    except (ValueError, OverflowError) as exc:  # CroniterBadDateError ("failed to find prev date") is a ValueError
        raise ScheduleError(str(exc)[:200]) from None
    if after is not None:
        if len(_KNOWN) >= 256:
            _KNOWN.clear()
        _KNOWN[window.cron] = (float(start.timestamp()), float(after))
    return float(start.timestamp())


def _evaluated(spec: PoolSpec, now: float) -> tuple[list[tuple[Schedule, float]], list[tuple[int, str]]]:
    """The pool's windows open at ``now`` with the time each opened, and those that cannot be evaluated (their
    index in ``schedules`` and a sentence)."""
    opened, broken = [], []
    for index, window in enumerate(spec.schedules):
        try:
            start = last_start(window, now)
        except ScheduleError as exc:
            broken.append((index, f"schedule {window.cron!r} ({window.timezone}) cannot be evaluated ({exc}): "
                                  "ignored"))
            continue
        if now < start + window.duration:
            opened.append((window, start))
    return opened, broken


def open_windows(spec: PoolSpec, now: float) -> list[tuple[Schedule, float]]:
    """The pool's windows open at ``now``, each with the time it opened (a window that cannot be evaluated is not)."""
    return _evaluated(spec, now)[0]


def unusable(spec: PoolSpec, now: float) -> list[tuple[int, str]]:
    """The pool's windows that cannot be evaluated at ``now``: each one's index in ``schedules`` and why."""
    return _evaluated(spec, now)[1]


def effective_min(spec: PoolSpec, now: float) -> tuple[int, str]:
    """The floor in force at ``now`` (never above ``max``) and why: the highest open window's min, else the pool's
    (and why, when a window could not be evaluated)."""
    best: tuple[Schedule, float] | None = None
    windows, broken = _evaluated(spec, now)
    for window, start in windows:
        if window.min > spec.min and (best is None or window.min > best[0].min):
            best = (window, start)
    if best is None:
        return spec.min, "; ".join(why for _, why in broken)
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
