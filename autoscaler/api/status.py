"""GET /: the operator's status page, server-rendered, no JavaScript, refreshing itself."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, Response, current_app, render_template, request

from autoscaler.api import ApiError, require_auth
from autoscaler.answers import event_json
from autoscaler.api.guards import principal, visible_events
from autoscaler.service import Service

bp = Blueprint("status", __name__)
CHART_W, CHART_H, CHART_POINTS = 240, 60, 200  # the plot area; the axes' labels sit outside it
LEFT, BOTTOM = 26, 16  # room for the count axis' labels (left) and the time axis' (below)
COUNT_CHANGES = ("scaled", "count_corrected")  # a decision that changed the count, or an operator's correction


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M")


def chart(events: list[dict[str, Any]], low: int, high: int, now: float) -> dict[str, Any] | None:
    """An SVG step line of node count over time from a pool's events (oldest first), with a count axis (0, min,
    the top) and a time axis (first change, now, UTC); None without data. Every count change is drawn: scale-outs,
    scale-ins, the reconciler's and the operator's count corrections."""
    points: list[tuple[float, int]] = []
    for ev in events:
        if ev["outcome"] in COUNT_CHANGES and ev["to"] is not None:
            if ev["from"] is not None and (not points or points[-1][1] != ev["from"]):
                points.append((ev["_t"], ev["from"]))
            points.append((ev["_t"], ev["to"]))
    if not points:
        return None
    points.append((now, points[-1][1]))
    t0, t1 = points[0][0], max(points[-1][0], points[0][0] + 1)
    top = max(high, max(c for _, c in points), 1)

    def y_of(count: int) -> float:
        return round(CHART_H - count / top * (CHART_H - 4) - 2, 1)

    xy, prev = [], None
    for t, count in points:
        x = round(LEFT + (t - t0) / (t1 - t0) * CHART_W, 1)
        if prev is not None:
            xy.append(f"{x},{prev}")  # a step chart: the count holds until it changes
        xy.append(f"{x},{y_of(count)}")
        prev = y_of(count)
    y_ticks = [{"y": y_of(c), "label": str(c)} for c in sorted({0, low, top})]
    x_ticks = [{"x": LEFT, "label": _time(t0), "anchor": "start"},
               {"x": LEFT + CHART_W, "label": _time(t1), "anchor": "end"}]
    return {"points": " ".join(xy), "w": LEFT + CHART_W, "h": CHART_H + BOTTOM, "left": LEFT, "plot_h": CHART_H,
            "top": top, "last": points[-1][1], "min_y": y_of(low), "y_ticks": y_ticks, "x_ticks": x_ticks,
            "changes": sum(1 for ev in events if ev["outcome"] in COUNT_CHANGES and ev["to"] is not None)}


def _pool_view(svc: Service, spec: Any, now: float) -> dict[str, Any]:
    pool = svc.pool_json(spec, with_nodes=True)
    rows = svc.store.events(spec.name, CHART_POINTS)
    evs = [{**event_json(r), "_t": r.time} for r in reversed(rows)]
    pool["chart"] = chart(evs, spec.min, spec.max, now)
    return pool


@bp.get("/")
def status() -> Response:
    """Every pool, a node-count chart each, and the latest events."""
    try:
        require_auth("read")
        svc: Service = current_app.extensions["autoscaler"]
        now = svc.clock()
        pools = [_pool_view(svc, spec, now) for spec in svc.settings.pools.values() if principal().sees(spec.name)]
        events = [event_json(r) for r in visible_events(svc.store, request.args.get("pool") or None, 30)]
    except ApiError as exc:
        if exc.status != 401:  # a credential without the read scope, or a pool outside its pools
            return Response(render_template("unauthorized.html", message=exc.message, forbidden=True),
                            status=exc.status, mimetype="text/html")
        body = render_template("unauthorized.html", message=exc.message)
        return Response(body, status=401, mimetype="text/html",
                        headers={"WWW-Authenticate": 'Basic realm="gpu-pool-autoscaler", charset="UTF-8"'})
    html = render_template("status.html", pools=pools, events=events, refresh=10)
    return Response(html, mimetype="text/html")
