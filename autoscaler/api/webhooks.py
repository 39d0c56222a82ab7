"""POST /webhook/alertmanager, /webhook/grafana and /webhook/azure-monitor."""
from __future__ import annotations

from typing import Any, Callable

from flask import Blueprint, Response, current_app, request

from autoscaler.answers import WebhookAnswer, decision_body
from autoscaler.api import fail, read_json, require_auth
from autoscaler.api.guards import principal, same_origin_only
from autoscaler.config.durations import retry_after_header
from autoscaler.engine.parts import Parts
from autoscaler.pool.events import acting_as
from autoscaler.repair import start as repair
from autoscaler.auth.credentials import Principal
from autoscaler.models import Action, AlertStatus, Decision, Notification, Outcome
from autoscaler.routing import ACTIONS, parse_step
from autoscaler.sources import PayloadError, alertmanager, azure_monitor, grafana

bp = Blueprint("webhooks", __name__, url_prefix="/webhook")


def _query() -> dict[str, str]:
    query = {k: v for k, v in request.args.items() if k in ("pool", "action", "step")}
    if "action" in query and query["action"].strip().lower() not in ACTIONS:
        fail(422, f"query parameter action={query['action'][:40]!r} is not scale_out or scale_in")
    if "step" in query:
        step, problem = parse_step(query["step"])
        if step is None:
            fail(422, f"query parameter {problem}")
    return query


_RETRYABLE = (Outcome.FAILED, Outcome.SKIPPED_BACKOFF, Outcome.SKIPPED_BUSY)


def _answer(note: Notification, decisions: list[Decision]) -> Response:
    answer = WebhookAnswer(received=len(note.alerts), decisions=[decision_body(d) for d in decisions])
    resp = current_app.response_class(answer.model_dump_json(by_alias=True, exclude_unset=True) + "\n",
                                      mimetype="application/json")
    # A retry can help: a retryable failure, a backoff, or a pool held by another decision of ours (skipped_busy
    # with a Retry-After; the cloud's own busy state has none and stays 200).
    retry = [d.retry_after for d in decisions if d.retry_after is not None and d.outcome in _RETRYABLE]
    if retry:
        resp.status_code = 503
        resp.headers["Retry-After"] = retry_after_header(min(retry))
    return resp


def _handle(parse: Callable[[Any, dict[str, str]], Notification]) -> Response:
    require_auth("webhook")
    same_origin_only()  # senders send no Origin; a browser on another site's page does
    query = _query()
    body = read_json()
    try:
        note = parse(body, query)
    except PayloadError as exc:
        fail(422 if isinstance(body, dict) else 400, str(exc))
    svc = current_app.extensions["autoscaler"]
    engine = svc.engine
    _within_pools(note, svc.parts)
    with acting_as(principal().name):
        return _answer(note, engine.handle_notification(note, principal().pools))


def _within_pools(note: Notification, parts: Parts) -> None:
    """403 for the whole notification when a credential limited to some pools sends an alert for another configured
    pool, or for a group none of whose pools it may act on (nothing of it acts): firing, resolved or ignored, each
    writes that pool's event log. A group with one of its pools goes on: the engine chooses among those only."""
    who = principal()
    if who.pools is None:
        return
    groups = parts.settings.groups
    for alert in note.alerts:
        if alert.is_test:
            continue
        route = parts.router.route(alert, note.query)
        if route.problem or route.pool is None:
            continue
        if route.pool in parts.settings.pools and not who.sees(route.pool):
            fail(403, f"credential {who.name!r} may not send alerts for pool {route.pool[:80]!r} (not in its pools)")
        if route.pool in groups and not any(who.sees(p) for p in groups[route.pool]):
            fail(403, f"credential {who.name!r} may not send alerts for group {route.pool[:80]!r} (none of its "
                      "pools is in the credential's pools)")
        if route.pool in groups and route.action is Action.REPAIR and alert.status is AlertStatus.FIRING:
            _repair_within(who, parts, route.pool, alert.labels.get(parts.settings.config.routing.node_label, ""))


def _repair_within(who: Principal, parts: Parts, group: str, node: str) -> None:
    """A repair for a group acts on the member the named node is of: 403 when that member is not the credential's
    (the group would otherwise widen it: cordon another team's node and grow its pool)."""
    members = repair.members_of(parts.repairs, group, node.strip()) if node.strip() else []
    if members and not any(who.sees(m.name) for m in members):
        fail(403, f"credential {who.name!r} may not repair node {node[:80]!r}: it is a node of pool "
                  f"{members[0].name[:80]!r} of group {group[:80]!r}, not in the credential's pools")


@bp.post("/alertmanager")
def alertmanager_hook() -> Response:
    """Alertmanager ``webhook_configs`` receiver (payload version 4)."""
    return _handle(alertmanager.parse)


@bp.route("/grafana", methods=["POST", "PUT"])
def grafana_hook() -> Response:
    """Grafana unified-alerting contact point or legacy webhook notification channel; a contact point's HTTP
    method may be set to PUT, which means the same as POST."""
    return _handle(grafana.parse)


@bp.post("/azure-monitor")
def azure_monitor_hook() -> Response:
    """An Azure Monitor action group's webhook or secure webhook, with the common alert schema enabled."""
    return _handle(azure_monitor.parse)
