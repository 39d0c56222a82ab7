"""What the tuner judges candidates on: the history's tuning span as the weeks after it will look (issue 47).

Two corrections, each made only where the history shows it, and said in tuning.json (``outlook``):

- **Trend.** The level of each whole day (its mean demand) is fitted by a line on a log scale: ``growth`` per day.
  A fit no steadier than the days' own scatter says nothing (a plateau whose level moves from day to day is no
  trend), so the growth is shrunk by its own noise: ``growth x max(0, 1 - (T / t)^2)``, ``t`` the fit's t-statistic
  and ``T`` the t-statistic a history with no trend exceeds one time in twenty (TREND_T, by the number of days:
  3.18 for five); none at ``t`` <= T, 3/4 of it at ``t`` = 2 T. A growing history is then scaled minute by
  minute to the level the fit gives HORIZON_DAYS after the tuning span ends (the middle of the week after a week's
  history with two days held back), a shrinking one to its level at the span's end (the last level seen, never
  extrapolated below it: the choice keeps what it needs now). At most ``MAX_GROWTH`` either way.
- **Lone peaks.** A day whose peak (its highest 15-minute mean) is over LONE times every other day's, and above
  them for at most LONE_MINUTES, is a one-off: the search sees that day capped at the highest peak another day of
  the span reached (a peak seen on two days or more recurs and is kept whole; a day busy for hours is a level, not
  a peak). The span's worst day is then a day that recurs, and the choice does not keep a
  whole week's headroom for one afternoon. A span of fewer than MIN_DAYS whole days is taken as it is: one day is no
  evidence of how often anything recurs.

The held-back days are never read (the confirm span is replayed as it was), and the report's tuning-span figures
are the chosen settings replayed on the history as it was.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from autoscaler.replay.trace import Trace

DAY = 1440
MIN_DAYS = 3  # whole days a trend or a lone peak is read from
#: The t-statistic of a line fitted to n days' levels that a history with no trend exceeds one time in twenty
#: (Student's t, n - 2 degrees of freedom, two-sided 95%); below it, the days' own scatter, not a trend.
TREND_T = {3: 12.71, 4: 4.30, 5: 3.18, 6: 2.78, 7: 2.57, 8: 2.45, 9: 2.36, 10: 2.31, 11: 2.26, 12: 2.23}
TREND_T_MANY = 2.2  # more than 12 days
HORIZON_DAYS = 7.0  # a growing history is judged at its level this many days after the tuning span ends
MAX_GROWTH = 1.5  # the level is scaled by at most this much, up or down
PEAK_MINUTES = 15  # a day's peak: its highest mean over this many minutes
LONE = 1.5  # a day's peak over this many times every other day's is a one-off (the synthetic families reach 1.41)
LONE_MINUTES = 240  # ... when over every other day's peak for at most this many minutes


@dataclass(frozen=True)
class Outlook:
    """The tuning span as judged (``demand``), and what was changed: the fitted growth a day, the share of it kept,
    the level factor at the span's start and end, and the lone-peak days (index, peak, cap)."""

    demand: tuple[float, ...]
    growth_per_day: float = 0.0
    t: float = 0.0
    kept: float = 0.0
    factors: tuple[float, float] = (1.0, 1.0)
    lone_peaks: tuple[tuple[int, float, float], ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return self.factors != (1.0, 1.0) or bool(self.lone_peaks)

    def as_json(self) -> dict[str, Any]:
        return {"growth_per_day_pct": round(100 * (math.exp(self.growth_per_day) - 1), 2), "t": round(self.t, 2),
                "growth_kept": round(self.kept, 3), "level_factor": [round(f, 3) for f in self.factors],
                "horizon_days": HORIZON_DAYS,
                "lone_peaks": [{"day": d + 1, "peak": round(p, 2), "capped_at": round(c, 2)}
                               for d, p, c in self.lone_peaks]}


def day_levels(demand: Sequence[float], minutes: int) -> list[float]:
    """The mean demand of each whole day of the first ``minutes``."""
    return [sum(demand[d * DAY:(d + 1) * DAY]) / DAY for d in range(minutes // DAY)]


def trend(levels: Sequence[float]) -> tuple[float, float]:
    """The least-squares slope of log(level) against the day (growth a day, on a log scale) and its t-statistic
    (0, 0 with fewer than MIN_DAYS levels or a level at or under zero)."""
    n = len(levels)
    if n < MIN_DAYS or min(levels, default=0.0) <= 0:
        return 0.0, 0.0
    ys = [math.log(v) for v in levels]
    mx, my = (n - 1) / 2, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in range(n))
    slope = sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sxx
    residual = sum((y - (my + slope * (x - mx))) ** 2 for x, y in enumerate(ys))
    spread = math.sqrt(residual / (n - 2) / sxx) if n > 2 else 0.0
    if spread <= 1e-12:
        return slope, math.inf if abs(slope) > 1e-12 else 0.0
    return slope, slope / spread


def peak(day: Sequence[float], width: int = PEAK_MINUTES) -> float:
    """The highest mean over ``width`` consecutive minutes of a day (its highest minute for a shorter day)."""
    if len(day) < width:
        return max(day, default=0.0)
    run = sum(day[:width])
    best = run
    for i in range(width, len(day)):
        run += day[i] - day[i - width]
        best = max(best, run)
    return best / width


def lone_peaks(demand: Sequence[float], minutes: int) -> list[tuple[int, float, float]]:
    """The days of the first ``minutes`` whose peak is over LONE times every other day's: (day, peak, the highest
    peak of the other days, which the day is capped at)."""
    days = minutes // DAY
    if days < MIN_DAYS:
        return []
    peaks = [peak(demand[d * DAY:(d + 1) * DAY]) for d in range(days)]
    out = []
    for d, top in enumerate(peaks):
        others = max(p for i, p in enumerate(peaks) if i != d)
        above = sum(1 for v in demand[d * DAY:(d + 1) * DAY] if v > others)
        if top > LONE * others and above <= LONE_MINUTES:
            out.append((d, top, others))
    return out


def outlook(trace: Trace, train: int) -> Outlook:
    """The tuning span (the first ``train`` minutes) as the weeks after it will look: lone peaks capped, the level
    moved along the history's own trend (module doc)."""
    demand = list(trace.demand[:train])
    lone = lone_peaks(demand, train)
    for d, _, cap in lone:
        for i in range(d * DAY, (d + 1) * DAY):
            demand[i] = min(demand[i], cap)
    levels = day_levels(demand, train)
    slope, t = trend(levels)
    edge = TREND_T.get(len(levels), TREND_T_MANY)
    kept = 1.0 - (edge / t) ** 2 if abs(t) > edge else 0.0
    rate = slope * kept
    factors = (1.0, 1.0)
    if rate:
        target = train / DAY + (HORIZON_DAYS if rate > 0 else 0.0)  # in days from the span's start

        def factor(minute: float) -> float:
            return min(MAX_GROWTH, max(1 / MAX_GROWTH, math.exp(rate * (target - minute / DAY))))

        demand = [round(d * factor(i + 0.5), 4) for i, d in enumerate(demand)]
        factors = (factor(0.5), factor(train - 0.5))
    return Outlook(tuple(demand), slope, t, kept, factors, tuple(lone))


__all__ = ["Outlook", "day_levels", "lone_peaks", "outlook", "peak", "trend"]
