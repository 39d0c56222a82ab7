"""A pool's chart on the status page: an SVG drawn by the server from the pool's recent events (pure: no I/O).

Made to be read at a glance at 3 a.m.: the count asked for as a thick step line on an axis that starts at 0 and
ends just above the counts drawn (a pool's far-away max would flatten a 2 -> 3 step to a pixel), the ready count and
the nodes in flight where decisions recorded them, the demand or alert value on its own axis, and a marker on every
decision: a triangle for a change (up or down), a red band for ``no_capacity``, a cross for a failure, an orange
diamond for a repair's replacement (``repair_started``) and a purple square for its removal (``repaired``), a tick
for a decision that changed nothing. Every marker says what it was in its tooltip. The axes (a tick per node for a
small pool, round clock times, a range that starts at the pool's first change) and which labels fit are
``chart_axes.py``'s.
"""
from __future__ import annotations

import bisect
import functools
from datetime import datetime, timezone
from typing import Any, Iterable

from autoscaler.api.chart_axes import count_ticks, fits, minor, text_width, time_range, time_ticks
from autoscaler.decide.inflight import from_scale_outs

PLOT_W, PLOT_H = 720, 160  # the plot area; axes' labels, the legend and the markers' labels sit outside it
LEFT, RIGHT, TOP, BOTTOM = 40, 100, 24, 36  # RIGHT: "N now", then the value axis at the far right
MIN_SPAN = 600.0  # seconds: a chart of a change made a minute ago still spreads over the width
MARKS = 48  # a chart's markers at most, and its value dots: beyond, those of a kind in one stretch of time are one
STRETCHES = (48, 24, 12, 6, 3, 1)  # the stretches tried, the narrowest first (7 kinds x 1 stretch fit MARKS)
# a decision that changed the count, the size given back after a shortfall, an operator's correction, a repair's
# replacement asked for and the repaired node's removal
COUNT_CHANGES = ("scaled", "no_capacity", "count_corrected", "repair_started", "repaired")
MARKED = {"scaled": "change", "no_capacity": "short", "failed": "failed", "dry_run": "dry",
          "repair_started": "replace", "repaired": "removed"}
ON_LINE = ("up", "down", "dry", "replace", "removed")  # markers drawn on the count line (at the count they left)


def span(seconds: float) -> str:
    """A length of time as a person says it: "42s", "3 min", "2 h 5 min", "3 d"."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min" if s % 3600 >= 60 else f"{s // 3600} h"
    return f"{s // 86400} d"


def ago(seconds: float) -> str:
    """A time as a person says it: "just now", "42s ago", "3 min ago", "2 h 5 min ago", "3 d ago"."""
    return "just now" if seconds < 5 else f"{span(seconds)} ago"


def minutes(seconds: float) -> str:
    """A wait in whole minutes, rounded up ("ready" when none is left)."""
    if seconds <= 0:
        return "ready"
    return f"{-(-int(seconds) // 60)} min"


def _hhmm(t: float) -> str:
    return _minute(int(t // 60))


@functools.lru_cache(maxsize=4096)
def _minute(minute: int) -> str:  # a page of 800 charts labels the same few minutes thousands of times
    return datetime.fromtimestamp(minute * 60, timezone.utc).strftime("%H:%M")


def _steps(points: list[tuple[float, float]], x_of: Any, y_of: Any) -> str:
    """An SVG polyline's points for a step line: each value holds until the next."""
    xy: list[str] = []
    prev = None
    for t, v in points:
        x, y = x_of(t), y_of(v)
        if prev is not None:
            xy.append(f"{x},{prev}")
        xy.append(f"{x},{y}")
        prev = y
    return " ".join(xy)


def _series(events: list[dict[str, Any]], now: float, provision_time: float,
            in_flight_now: int | None) -> dict[str, list[tuple[float, float]]]:
    """The count asked for (every change), the nodes in flight and the ready count (asked less in flight), and the
    alert's value or demand where a decision recorded one, each as (time, value). In flight is counted as the
    service counts it without a cluster view (``inflight.from_scale_outs``: a scale-out's nodes for
    ``provision_time``); at ``now`` it is the stored view's."""
    asked: list[tuple[float, float]] = []
    value: list[tuple[float, float]] = []
    scale_outs: list[tuple[float, int, int]] = []
    for ev in events:
        details = ev.get("details") or {}
        if ev["outcome"] in COUNT_CHANGES and ev["to"] is not None:
            if ev["from"] is not None and (not asked or asked[-1][1] != ev["from"]):
                asked.append((ev["_t"], ev["from"]))
            asked.append((ev["_t"], ev["to"]))
            if ev.get("action") == "scale_out" and ev["outcome"] == "scaled" and ev["from"] is not None:
                scale_outs.append((ev["_t"], ev["from"], ev["to"]))
        if isinstance(details.get("value"), (int, float)) and not isinstance(details.get("value"), bool):
            value.append((ev["_t"], float(details["value"])))
    flight: list[tuple[float, float]] = []
    ready: list[tuple[float, float]] = []
    if asked:
        booted = {t + provision_time + 1 for t, _, _ in scale_outs if t + provision_time + 1 < now}  # just past it
        times = sorted({t for t, _ in asked} | booted)
        count_at, outs_at = _last_at(asked), _upto(scale_outs)
        for t in times + [now]:
            count = int(count_at(t))
            moving = from_scale_outs(outs_at(t), count, t, provision_time)[0]
            if t == now and in_flight_now is not None:
                moving = min(in_flight_now, count)
            flight.append((t, moving))
            ready.append((t, count - moving))
    return {"asked": asked, "ready": ready, "flight": flight, "value": value}


def _in_order(times: list[float]) -> bool:
    return all(a <= b for a, b in zip(times, times[1:]))


def _last_at(points: list[tuple[float, float]]) -> Any:
    """The value of the last point (in list order) at or before a time: bisected when the points are in time order,
    as a page's are (walking the list for each of a chart's times made 800 charts of 125 events a tenth of the
    page), walked when not."""
    times = [t for t, _ in points]
    if _in_order(times):
        return lambda t: points[bisect.bisect_right(times, t) - 1][1]
    return lambda t: next(c for at, c in reversed(points) if at <= t)


def _upto(scale_outs: list[tuple[float, int, int]]) -> Any:
    """The scale-outs at or before a time, in list order (bisected when in time order, as in ``_last_at``)."""
    times = [t for t, _, _ in scale_outs]
    if _in_order(times):
        return lambda t: scale_outs[:bisect.bisect_right(times, t)]
    return lambda t: [s for s in scale_outs if s[0] <= t]


def chart(events: list[dict[str, Any]], low: int, high: int, now: float, current: int | None = None,
          provision_time: float = 0.0, in_flight_now: int | None = None,
          value_label: str = "alert value") -> dict[str, Any] | None:
    """The chart of a pool's events (oldest first; ``_t`` their time): every member the template draws, or None
    when there is nothing to draw. ``current``: the count now, drawn flat when no change is in the events."""
    if current is not None and not any(ev["outcome"] in COUNT_CHANGES and ev["to"] is not None for ev in events):
        events = [{"outcome": "count_corrected", "from": None, "to": current, "_t": now - MIN_SPAN}, *events]
        shown_changes = 0
    else:
        shown_changes = None
    s = _series(events, now, provision_time, in_flight_now)
    asked = s["asked"]
    if not asked:
        return None
    asked.append((now, current if current is not None else asked[-1][1]))
    decisions = [ev for ev in events if ev["outcome"] in MARKED or ev.get("action")]
    moved = [t for t, _ in asked[:-1]] if shown_changes is None else []  # not the flat line drawn for no change
    t0 = time_range(moved + [ev["_t"] for ev in decisions if ev["outcome"] in MARKED] + [t for t, _ in s["value"]],
                    [ev["_t"] for ev in decisions], now, MIN_SPAN)
    t1 = now
    decisions = [ev for ev in decisions if ev["_t"] >= t0]  # an older "no change" is left out, not squeezed in
    if asked[0][0] > t0:  # the count before the first change, from the chart's left edge
        asked.insert(0, (t0, asked[0][1]))
    shown = [c for _, c in asked + s["ready"] + s["flight"]] + [low]
    top = int(max(max(shown), 1))
    if high <= top * 1.5 + 1:  # the max fits without flattening the steps: draw it
        top = max(top, high)
    else:
        top = top + 1
    ticks = count_ticks(top, low, PLOT_H)
    phone_hides = minor(ticks, top, PLOT_H)

    def x_of(t: float) -> float:
        return round(LEFT + (t - t0) / (t1 - t0) * PLOT_W, 1)

    def y_of(count: float) -> float:
        return round(TOP + PLOT_H - count / top * PLOT_H, 1)

    out: dict[str, Any] = {
        "w": LEFT + PLOT_W, "svg_w": LEFT + PLOT_W + RIGHT, "h": TOP + PLOT_H + BOTTOM, "left": LEFT,
        "right": LEFT + PLOT_W,
        "plot_top": TOP, "plot_h": TOP + PLOT_H, "top": top, "last": asked[-1][1], "max": high,
        "max_y": y_of(high) if high <= top else None, "min_y": y_of(low),
        "points": _steps(asked, x_of, y_of), "last_y": y_of(asked[-1][1]),
        "ready": _steps(s["ready"], x_of, y_of) if any(v for _, v in s["flight"]) else None,
        "flight": _area(s["flight"], x_of, y_of) if any(v for _, v in s["flight"]) else None,
        "y_ticks": [{"y": y_of(c), "label": str(c), "minor": c in phone_hides} for c in ticks],
        "grid": [y_of(c) for c in (range(1, top) if top <= 12 else ticks) if c not in (0, low, top)],
        "x_ticks": [{"x": LEFT, "label": _hhmm(t0), "sub": ago(now - t0), "anchor": "start"},
                    *({"x": x_of(t), "label": _hhmm(t), "sub": ago(now - t), "anchor": "middle", "minor": True}
                      for t in time_ticks(t0, t1, PLOT_W)),
                    {"x": LEFT + PLOT_W, "label": _hhmm(t1), "sub": "now", "anchor": "end"}],
        "changes": shown_changes if shown_changes is not None else
        sum(1 for ev in events if ev["outcome"] in COUNT_CHANGES and ev["to"] is not None),
        "markers": list(_markers(decisions, x_of, y_of, now, t0)),
        "value": _value(s["value"], x_of, value_label, t0, now),
    }
    out["shorts"] = sum(m["n"] for m in out["markers"] if m["kind"] == "short")
    out["repairs"] = sum(m["n"] for m in out["markers"] if m["kind"] in ("replace", "removed"))
    _place_labels(out)
    return out


def _place_labels(c: dict[str, Any]) -> None:
    """Which labels are drawn: "N now" always, then each "no capacity" over its band and each value beside its dot
    where it covers nothing drawn before it (newest first: the latest is the one read); the rest keep their
    tooltips. Marks each with ``label`` True or False."""
    right = c["right"]
    now_text = f'{c["last"]} now'
    taken = [(right + 4, c["last_y"] - 10, right + 6 + text_width(now_text, 13), c["last_y"] + 6),
             (c["left"], c["plot_h"] + 2, right, c["h"])]  # the time axis' labels
    for m in reversed(c["markers"]):
        if m["kind"] == "short":
            w = text_width("no capacity")
            m["label"] = fits((m["x"] - w / 2, TOP - 18, m["x"] + w / 2, TOP - 4), taken)
    for v in reversed(c["value"]["points"] if c["value"] else []):
        x, y = v["x"] + 6, v["y"] - 5
        v["label"] = x + text_width(v["v"]) <= right + 4 and fits((x, y - 11, x + text_width(v["v"]), y + 2), taken)


def _area(points: list[tuple[float, float]], x_of: Any, y_of: Any) -> str:
    """The nodes in flight as a filled step area from 0."""
    line = _steps(points, x_of, y_of)
    return f"{x_of(points[0][0])},{y_of(0)} {line} {x_of(points[-1][0])},{y_of(0)}"


def _kind(ev: dict[str, Any]) -> str:
    kind = MARKED.get(ev["outcome"], "other")
    if kind == "change":
        return "up" if ev["to"] is not None and ev["from"] is not None and ev["to"] > ev["from"] else "down"
    return kind


def _budget(items: list[tuple[str, float, Any]], t0: float, t1: float) -> list[list[tuple[str, float, Any]]]:
    """``items`` (kind, time, what), oldest first, as the groups each marker stands for: one each while they fit
    ``MARKS``; else those of a kind within one stretch of the time axis together, the stretches as narrow as the
    budget lets (a page's cost then does not grow with the decisions a busy pool makes: issue 45, item 11)."""
    if len(items) <= MARKS:
        return [[item] for item in items]
    for stretches in STRETCHES:
        width = max(t1 - t0, 1e-9) / stretches
        groups: dict[tuple[str, int], list[tuple[str, float, Any]]] = {}
        for item in items:
            groups.setdefault((item[0], min(int((item[1] - t0) / width), stretches - 1)), []).append(item)
        if len(groups) <= MARKS:
            break
    return sorted(groups.values(), key=lambda g: g[-1][1])


def _markers(decisions: list[dict[str, Any]], x_of: Any, y_of: Any, now: float,
             t0: float) -> Iterable[dict[str, Any]]:
    """One marker per decision, or per group of them beyond ``MARKS``: what it was, where (the newest's place), and a
    tooltip saying when and why (a group: how many of each outcome, and the newest's why)."""
    for group in _budget([(_kind(ev), ev["_t"], ev) for ev in decisions], t0, now):
        kind, _, ev = group[-1]
        to = ev["to"] if ev["to"] is not None else ev["from"]
        y = y_of(to) if to is not None and kind in ON_LINE else None
        title = f"{ago(now - ev['_t'])} ({_hhmm(ev['_t'])} UTC): {ev['outcome']}"
        if ev["from"] is not None and ev["to"] is not None and ev["from"] != ev["to"]:
            title += f" {ev['from']} -> {ev['to']}"
        title = f"{title}: {ev.get('reason', '')}"
        if len(group) > 1:
            counts: dict[str, int] = {}
            for _, _, e in group:
                counts[e["outcome"]] = counts.get(e["outcome"], 0) + 1
            title = (f"{len(group)} decisions {_hhmm(group[0][1])}-{_hhmm(ev['_t'])} UTC ("
                     + ", ".join(f"{n} {o}" for o, n in counts.items()) + f"); the newest {title}")
        yield {"kind": kind, "x": x_of(ev["_t"]), "y": y, "title": title[:200], "n": len(group)}


def _value(points: list[tuple[float, float]], x_of: Any, label: str, t0: float,
           now: float) -> dict[str, Any] | None:
    """The alert's value (or demand) on the right-hand axis, 0 to just above its largest; beyond ``MARKS`` dots,
    the highest of each stretch of time (``_budget``)."""
    if not points:
        return None
    high = max(max(v for _, v in points), 1e-9)

    def y_of(v: float) -> float:
        return round(TOP + PLOT_H - max(v, 0.0) / high * PLOT_H, 1)

    kept = [max(g, key=lambda item: item[2]) + (len(g),) for g in _budget([("v", t, v) for t, v in points], t0, now)]
    return {"points": [{"x": x_of(t), "y": y_of(v), "v": f"{v:g}", "n": n} for _, t, v, n in kept],
            "label": label,
            "ticks": [{"y": y_of(0.0), "label": "0"}, {"y": y_of(high), "label": f"{high:g}"}],
            "last": f"{points[-1][1]:g}"}
