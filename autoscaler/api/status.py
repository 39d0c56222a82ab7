"""GET /: the operator's status page, server-rendered, no JavaScript, refreshing itself.

Every pool's state (a section with its chart for those that matter, ``status_pick.py``; a row of the pools' table
for the rest), each fallback group with the pool its next scale-out goes to, and the event log filtered and paged
as ``GET /api/v1/events`` takes it (``autoscaler/api/event_query.py``). The page reads the store a fixed number of
times whatever the number of pools: every pool's rows once (``service.Stored``), the charted pools' recent events in
one read, one page of events (issue 34, item 9); and draws at most ``CHARTS`` charts of at most ``chart.MARKS``
markers each, whatever the history holds (issue 45, item 11).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, current_app, render_template, request
from markupsafe import Markup

from autoscaler import __version__
from autoscaler.answers import event_json
from autoscaler.api import ApiError, require_auth
from autoscaler.api.chart import ago, chart, minutes, span
from autoscaler.api.chart_svg import svg
from autoscaler.api.event_query import OUTCOMES, SOURCES, EventQuery, page, parse
from autoscaler.api.guards import principal
from autoscaler.api.status_pick import CHARTS, WINDOW, pick, tier, trouble
from autoscaler.api.status_rows import row, table
from autoscaler.config.durations import rfc3339
from autoscaler.decide.groups import Member, choose
from autoscaler.models import Action, Mode, PoolSpec
from autoscaler.pool.stamps import pulled_back
from autoscaler.repair.alerts import xid_of
from autoscaler.service import Service, Stored
from autoscaler.store import EventRecord

bp = Blueprint("status", __name__)
CHART_POINTS = 200  # a chart shows a pool's last 6 h (WINDOW), at most its 200 newest events
PAGE_EVENTS = 30
QUICK_OUTCOMES = ("scaled", "no_capacity", "failed", "skipped_cooldown", "skipped_limit", "paused")

__all__ = ["CHARTS", "bp", "chart"]


def _when(t: float | None, now: float) -> str | None:
    return None if t is None else ago(now - t)


def _until(t: float, now: float) -> str:
    """A time to come as a person says it: "in 9 min" (or "now" once it has passed)."""
    return f"in {span(t - now)}" if t - now >= 1 else "now"


def _repairs(spec: PoolSpec, stored: Stored, now: float) -> list[dict[str, Any]] | None:
    """The pool's nodes in repair as the page lists them: since when (said relative, the time on hover), the XID
    the alert reported (``repair/alerts.py`` keeps it in the reason), the replacement asked for and how much of
    ``repair.grace`` is left for work that cannot move (after it, that work is evicted)."""
    if spec.repair is None or stored.repairs is None:
        return None
    rows = []
    for r in stored.repairs.get(spec.name, []):
        ends = r.since + spec.repair.grace
        rows.append({"node": r.node, "state": r.state, "since": ago(now - r.since), "since_at": rfc3339(r.since),
                     "xid": xid_of(r.reason, r.node), "replacement": r.replacement, "reason": r.reason,
                     "grace_left": _until(ends, now) if ends > now else "over", "grace_at": rfc3339(ends),
                     "error": r.error or None})
    return rows


def _pool_view(spec: PoolSpec, pool: dict[str, Any], rows: list[EventRecord], stored: Stored,
               now: float) -> dict[str, Any]:
    """A pool's row: its API answer, its chart, and its times said as a person would."""
    evs = [{"_t": r.time, "outcome": r.outcome, "action": r.action, "from": r.from_, "to": r.to, "reason": r.reason,
            "details": r.details} for r in reversed(rows)]  # the chart's fields, as event_json names them
    label = "demand (GPUs)" if spec.scale_out.mode is Mode.DEMAND else "alert value"
    pool["chart"] = chart(evs, spec.min, spec.max, now, current=pool["current"], provision_time=spec.provision_time,
                          in_flight_now=pool.get("in_flight"), value_label=label)
    drawn = pool.pop("chart")
    pool["chart_svg"] = svg(spec.name, drawn) if drawn else None
    pool["chart"] = _legend(drawn) if drawn else None  # only what the legend reads: a page of 800 pools keeps
    # 800 of these alive until it is rendered, and every object it keeps makes the collector's full passes longer
    state = stored.states.get(spec.name)
    pool["short_left"] = span(state.short_until - now) if pool.get("short_until") and state and state.short_until \
        else None
    pool["repair_rows"] = _repairs(spec, stored, now)
    pool["view_at"] = rfc3339(pool["view_read_at"]) if pool.get("view_read_at") else None
    cooldown = pool["cooldown"]
    pool["cooldown_text"] = {"out": minutes(cooldown["scale_out_remaining_s"]),
                             "in": minutes(cooldown["scale_in_remaining_s"])}
    pool["backoff_text"] = minutes(pool["backoff_remaining_s"]) if pool["backoff_remaining_s"] else None
    pool["view_ago"] = _when(pool.get("view_read_at"), now)
    last = stored.last_events.get(spec.name)
    pool["last_ago"] = _when(last.time if last is not None else None, now)
    return pool


def _section(pool: dict[str, Any], events_args: str) -> SimpleNamespace:
    """A pool's section rendered now, and the few members the rest of the page reads: a page of 800 pools then
    keeps 800 strings alive rather than 800 trees of dicts (each object alive lengthens the collector's passes)."""
    html = Markup(render_template("status_pool.html", p=SimpleNamespace(**pool, events_args=events_args)))
    nodes = {k: pool[k] for k in ("nodes", "nodes_error") if k in pool}
    return SimpleNamespace(name=pool["name"], html=html, **nodes)


def _legend(drawn: dict[str, Any]) -> SimpleNamespace:
    value = drawn["value"]
    return SimpleNamespace(ready=bool(drawn["ready"]), flight=bool(drawn["flight"]), shorts=drawn["shorts"],
                           repairs=drawn["repairs"], max=drawn["max"], max_y=drawn["max_y"], changes=drawn["changes"],
                           value=SimpleNamespace(label=value["label"], last=value["last"]) if value else None)


def _groups(svc: Service, pools: dict[str, dict[str, Any]], stored: Stored, now: float) -> list[dict[str, Any]]:
    """Each fallback group the caller may see: its pools in order of preference, where the next scale-out and
    scale-in would go (``autoscaler/decide/groups.py``'s choice, on the stored views) and the group's capacity."""
    out = []
    for name, members in svc.settings.groups.items():
        seen = [pools[p] for p in members if p in pools]
        if not seen:
            continue
        chosen = {}
        for action in (Action.SCALE_OUT, Action.SCALE_IN):
            choice = choose([_member(p, stored) for p in seen], action, now)
            chosen[action.value] = {"pool": choice.first, "why_none": choice.why_none(),
                                    "passed": dict(choice.passed)}
        current = sum(p["current"] or 0 for p in seen)
        gpus = [p["gpus_per_node"] for p in seen]
        out.append({"name": name, "pools": seen, "chosen": chosen, "current": current,
                    "max": sum(p["max"] for p in seen), "unknown": [p["name"] for p in seen if p["current"] is None],
                    "gpus": sum((p["current"] or 0) * (p["gpus_per_node"] or 0) for p in seen)
                    if all(gpus) else None})
    return out


def _member(pool: dict[str, Any], stored: Stored) -> Member:
    state = stored.states.get(pool["name"])
    return Member(pool["name"], pool["current"], pool["min"], pool["max"], paused=pool["paused"],
                  short_until=state.short_until if state else None, short_reason=state.short_reason if state else "",
                  backoff_until=state.backoff_until if state else None)


def _chosen(specs: list[PoolSpec], answers: list[dict[str, Any]], stored: Stored, now: float,
            wanted: str | None) -> tuple[set[int], list[list[str]], list[int]]:
    """Which pools the page charts (their positions), what troubles each pool, and each pool's tier
    (``status_pick.py``)."""
    lasts = [stored.last_events.get(spec.name) for spec in specs]
    troubles = [trouble(pool, last, now) for pool, last in zip(answers, lasts)]
    tiers = [tier(pool, bool(t), last, now) for pool, t, last in zip(answers, troubles, lasts)]
    activity = [max(pool["last_scale_at"] or 0, last.time if last else 0) for pool, last in zip(answers, lasts)]
    return pick(tiers, activity, next((i for i, spec in enumerate(specs) if spec.name == wanted), None)), \
        troubles, tiers


def _render(query: EventQuery, error: str | None = None) -> Response:
    svc: Service = current_app.extensions["autoscaler"]
    now = svc.wall()
    specs = [spec for spec in svc.settings.pools.values() if principal().sees(spec.name)]
    stored = Stored.read(svc.store, nodes=bool(svc.parts.clusters),
                         repairs=any(spec.repair is not None for spec in specs))
    for spec in specs:  # times stamped ahead of this clock, shown as the next decision will read them (stamps.py)
        if spec.name in stored.states:
            stored.states[spec.name] = pulled_back(stored.states[spec.name], now, spec.short_for)[1]
    answers = svc.pools_json(specs, with_nodes=True, stored=stored)
    for spec, pool in zip(specs, answers):
        pool["gpus_per_node"] = spec.gpus_per_node
    charted, troubles, tiers = _chosen(specs, answers, stored, now, query.pool)
    recent = svc.store.recent_events(now - WINDOW, CHART_POINTS, pools=[specs[i].name for i in charted])
    pools = [_pool_view(specs[i], answers[i], recent.pop(specs[i].name, []), stored, now) for i in sorted(charted)]
    rest = query.args(pool="")  # the page's filters but the pool's, for each pool's link
    shown = [_section(pool, "&".join(filter(None, (urlencode({"pool": pool["name"]}), rest)))) for pool in pools]
    rows = [row(answers[i], troubles[i], stored.last_events.get(specs[i].name), now)
            for i in sorted(set(range(len(specs))) - charted, key=lambda i: (tiers[i], i))]
    events_rows, after = page(svc.store, query) if error is None else ([], None)
    events = [{**event_json(r), "ago": ago(now - r.time)} for r in events_rows]
    html = render_template("status.html", pools=shown, rows=table(rows), uncharted=len(rows),
                           names=[spec.name for spec in specs], charts=CHARTS, window_h=int(WINDOW // 3600),
                           troubled=[(spec.name, t) for spec, t in zip(specs, troubles) if t],
                           groups=_groups(svc, {p["name"]: p for p in answers}, stored, now),
                           events=events, query=query, next=after, error=error, refresh=10, version=__version__,
                           outcomes=OUTCOMES, quick=QUICK_OUTCOMES, sources=SOURCES)
    return Response(html, status=400 if error else 200, mimetype="text/html")


@bp.get("/")
def status() -> Response:
    """Every pool (the ones that matter charted), the groups, and a page of the event log
    (``?pool=&outcome=&source=&before=``; ``?pool=`` also charts that pool)."""
    try:
        require_auth("read")
        try:
            query = parse(request.args, default_limit=PAGE_EVENTS)
        except ApiError as exc:
            if exc.status != 400:
                raise
            return _render(EventQuery(limit=PAGE_EVENTS, default_limit=PAGE_EVENTS), exc.message)
        return _render(query)
    except ApiError as exc:
        if exc.status != 401:  # a credential without the read scope, or a pool outside its pools
            return Response(render_template("unauthorized.html", message=exc.message, forbidden=True),
                            status=exc.status, mimetype="text/html")
        body = render_template("unauthorized.html", message=exc.message)
        return Response(body, status=401, mimetype="text/html",
                        headers={"WWW-Authenticate": 'Basic realm="gpu-pool-autoscaler", charset="UTF-8"'})
