"""A chart's axes and labels (pure: no I/O): which counts and times get a tick, where the range starts, and which
labels are drawn without covering another.

Read at 3 a.m. on a laptop or a phone: a small pool gets a tick per node (a 2 -> 3 step is read off the axis, not
guessed between 0 and 6), a larger one ticks at a round step far enough apart for its labels; the time axis starts
just before the pool's first change rather than at its oldest "no change" (which squeezed hours of activity into
the chart's right fifth) and ticks at round clock times; a label that would overlap another is left out (its
marker keeps its tooltip).
"""
from __future__ import annotations

from typing import Iterable, Sequence

LABEL_GAP = 14.0  # px between two count labels (12px text)
PHONE_GAP = 30.0  # the same at phone width, where the chart is drawn at 0.4x and its labels at 24 units
TIME_GAP = 90.0  # px between two time labels ("14:30 UTC" and the "2 h ago" under it)
STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000)
TIME_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
PAD = 0.04  # of the span: the first change is drawn a little right of the axis, not on it


def count_ticks(top: int, low: int, height: float) -> list[int]:
    """The counts the axis labels, 0 to ``top``: every node while they stand ``LABEL_GAP`` apart, else the first
    round step that does, and ``top``; the pool's min where it does not crowd a tick already there."""
    per = height / max(top, 1)
    step = next((s for s in STEPS if s * per >= LABEL_GAP), STEPS[-1])
    ticks = list(range(0, top + 1, step))
    if top not in ticks:  # the axis' top is always said; a round tick too close below it gives way
        ticks = [t for t in ticks if (top - t) * per >= LABEL_GAP or t == 0] + [top]
    if 0 < low < top and all(abs(t - low) * per >= LABEL_GAP for t in ticks):  # the min, where there is room
        ticks.append(low)  # (its dashed line and the legend say it anyway)
    return sorted(ticks)


def minor(ticks: list[int], top: int, height: float) -> set[int]:
    """The ticks a phone leaves unlabelled (the page's CSS hides them): all but every count ``PHONE_GAP`` apart,
    0 and ``top``."""
    per = height / max(top, 1)
    step = next((s for s in STEPS if s * per >= PHONE_GAP), STEPS[-1])
    return {t for t in ticks if t % step and t != top or t != top and 0 < (top - t) * per < PHONE_GAP}


def time_range(changes: Sequence[float], others: Sequence[float], now: float, min_span: float) -> float:
    """The chart's left edge: a little before the pool's first change (a count change, shortfall, failure or
    repair); a decision that changed nothing widens the range only when nothing else is drawn. At least
    ``min_span`` before ``now``."""
    first = min(changes) if changes else min(others, default=now)
    first = min(first, now - min_span)
    return first - (now - first) * PAD


def time_ticks(t0: float, t1: float, width: float) -> list[float]:
    """Round clock times between the two ends (each end is labelled by the caller), at the first step whose
    labels stand ``TIME_GAP`` apart, none closer than that to an end."""
    span = t1 - t0
    if span <= 0:
        return []
    step = next((s for s in TIME_STEPS if s / span * width >= TIME_GAP), None)
    if step is None:
        return []
    first = (int(t0 // step) + 1) * step
    edge = 1.5 * TIME_GAP / width * span  # an end's label runs from the end inwards: a whole label, not half
    return [t for t in _range(first, t1, step) if t - t0 >= edge and t1 - t >= edge]


def _range(start: float, stop: float, step: float) -> Iterable[float]:
    t = start
    while t < stop:
        yield t
        t += step


def text_width(text: str, size: float = 12.0) -> float:
    """About how wide a label is drawn (digits and letters of a sans-serif font average 0.6 em)."""
    return len(text) * size * 0.6 + 2


def fits(box: tuple[float, float, float, float], taken: list[tuple[float, float, float, float]]) -> bool:
    """Whether a label's box (x0, y0, x1, y1) overlaps none of those already drawn; kept when it fits."""
    x0, y0, x1, y1 = box
    if any(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in taken):
        return False
    taken.append(box)
    return True
