"""Grafana webhooks: unified alerting (version 1) and the legacy alert notification (``evalMatches``)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.models import Alert, AlertStatus, Notification, Source, usable_value
from autoscaler.sources import PayloadError, Text, parse_value, validation_message, value_from_value_string
from autoscaler.sources.alertmanager import AlertmanagerAlert, AlertmanagerPayload, to_alert

LEGACY_STATES = {"alerting": AlertStatus.FIRING, "ok": AlertStatus.RESOLVED}  # no_data, paused, pending: ignored


class GrafanaAlert(AlertmanagerAlert):
    """A unified-alerting alert: Alertmanager's shape plus the query values."""

    values: dict[str, float | None] | None = None
    valueString: Text = ""


class GrafanaPayload(AlertmanagerPayload):
    """Unified alerting webhook contact point body."""

    alerts: list[GrafanaAlert] = Field(max_length=100_000)  # type: ignore[assignment]
    orgId: int | None = None
    title: Text = ""
    state: Text = ""
    message: Text = ""


class EvalMatch(BaseModel):
    """One series that matched a legacy alert rule."""

    model_config = ConfigDict(extra="ignore")

    value: float | None = None
    metric: Text = ""
    tags: dict[str, Text] | None = None


class LegacyPayload(BaseModel):
    """Grafana 4.x-8.x legacy alert notification (webhook channel)."""

    model_config = ConfigDict(extra="ignore")

    ruleId: int | None = None
    ruleName: Text = ""
    ruleUrl: Text = ""
    state: str = Field(strict=True)  # a word (alerting, ok, ...): a number or true is not a state Grafana sends
    title: Text = ""
    message: Text = ""
    tags: dict[str, Text] | None = None
    evalMatches: list[EvalMatch] | None = None


def is_test(labels: dict[str, str]) -> bool:
    """Grafana's "test contact point" notification."""
    return labels.get("alertname") == "TestAlert" and labels.get("instance") == "Grafana"


def _unified_value(alert: GrafanaAlert) -> float | None:
    """The first query's value (a direction's ``value_ref`` is applied later, by ``Alert.value_for``)."""
    given = [v for v in (alert.values or {}).values() if v is not None]
    if given:
        return next((v for v in given if math.isfinite(v)), given[0])  # non-finite only when none is: no value
    from_string = value_from_value_string(alert.valueString)
    return from_string if from_string is not None else parse_value(alert.annotations.get("value"))


def _legacy_value(values: list[float]) -> float | None:
    """The highest finite match; a non-finite one only when there is no other (routing then says it is no value)."""
    best, _ = usable_value(values)
    return best if best is not None or not values else values[0]


def _unified(body: dict[str, Any], query: dict[str, str], value_ref: str | None) -> Notification:
    try:
        payload = GrafanaPayload.model_validate(body)
    except ValidationError as exc:
        raise PayloadError(f"not a valid Grafana notification: {validation_message(exc)}") from None
    alerts = []
    for raw in payload.alerts:
        alert = to_alert(raw, Source.GRAFANA, _unified_value(raw))
        if raw.values:
            alert = replace(alert, values={k: v for k, v in raw.values.items() if v is not None})
            alert = replace(alert, value=alert.value_for(value_ref))
        if is_test(alert.labels):
            alert = Alert(**{**alert.__dict__, "is_test": True})
        alerts.append(alert)
    return Notification(source=Source.GRAFANA, alerts=tuple(alerts), query=query)


def _legacy(body: dict[str, Any], query: dict[str, str]) -> Notification:
    try:
        payload = LegacyPayload.model_validate(body)
    except ValidationError as exc:
        raise PayloadError(f"not a valid Grafana legacy notification: {validation_message(exc)}") from None
    state = payload.state.lower()
    status = LEGACY_STATES.get(state, AlertStatus.IGNORED)
    labels = {"alertname": payload.ruleName, **(payload.tags or {})}
    values = [m.value for m in payload.evalMatches or [] if m.value is not None]
    rule = payload.ruleId if payload.ruleId is not None else payload.ruleName
    test = payload.ruleName == "Test notification" or (payload.ruleId == 0 and "test" in payload.title.lower())
    alert = Alert(
        name=payload.ruleName,
        fingerprint=f"rule-{rule}",
        status=status,
        labels=labels,
        annotations={"message": payload.message, "state": state},
        value=_legacy_value(values),
        dedup_key=f"grafana_legacy|{rule}|{state}",
        is_test=test,
    )
    return Notification(source=Source.GRAFANA_LEGACY, alerts=(alert,), query=query)


def parse(body: Any, query: dict[str, str], value_ref: str | None = None) -> Notification:
    """A Notification from either Grafana format, told apart by their fields."""
    if not isinstance(body, dict):
        raise PayloadError("not a Grafana notification: the body must be a JSON object")
    if "alerts" in body:
        return _unified(body, query, value_ref)
    if "evalMatches" in body or "ruleId" in body or "ruleName" in body:
        return _legacy(body, query)
    raise PayloadError("not a Grafana notification: neither `alerts` (unified alerting) "
                       "nor `evalMatches`/`ruleId` (legacy alerting)")
