"""Azure Monitor alerts in the common alert schema (``schemaId: azureMonitorCommonAlertSchema``), as an action
group's webhook or secure webhook sends them: managed Prometheus alerts (``monitoringService: Prometheus``, the rule's
labels and ``expressionValue`` in ``alertContext``), metric and log search alerts with a ``conditionType`` and
``condition.allOf[]`` (dimensions, ``metricValue``), and any other kind, which routing alone may still place.

One delivery carries one alert. Azure retries a webhook that did not answer 2xx, so the dedup key is the alert's
``alertId`` and its ``monitorCondition``: a retry of the same firing is a duplicate, its resolution is not.
"""
from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autoscaler.models import Alert, AlertStatus, Notification, Source
from autoscaler.sources import PayloadError, Text, fingerprint_of, validation_message

SCHEMA_ID = "azureMonitorCommonAlertSchema"
CONDITIONS = {"fired": AlertStatus.FIRING, "resolved": AlertStatus.RESOLVED}
MAX_ITEMS = 1000  # labels, dimensions, criteria: far beyond what Azure sends, a bound on what a body may make us do
# Prometheus' ``humanize`` suffixes, which Azure's managed Prometheus uses in ``expressionValue`` ("12.7m", "1.5k").
_SI = {"y": -24, "z": -21, "a": -18, "f": -15, "p": -12, "n": -9, "u": -6, "µ": -6, "m": -3,
       "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18, "Z": 21, "Y": 24}
_HUMANIZED = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-zA-Zµ]?)\s*$")


class Essentials(BaseModel):
    """``data.essentials``: what every alert kind carries."""

    model_config = ConfigDict(extra="ignore")

    alertId: Text = Field(min_length=1, max_length=1024)
    alertRule: Text | None = None
    severity: Text | None = None
    signalType: Text | None = None
    monitorCondition: Text
    monitoringService: Text | None = None
    firedDateTime: Text | None = None
    resolvedDateTime: Text | None = None
    description: Text | None = None

    @field_validator("monitorCondition")
    @classmethod
    def _condition(cls, v: str) -> str:
        if v.strip().lower() not in CONDITIONS:
            raise ValueError(f"must be Fired or Resolved, not {v[:40]!r}")
        return v


class Dimension(BaseModel):
    """One dimension of a metric criterion (a label of the series that fired)."""

    model_config = ConfigDict(extra="ignore")

    name: Text
    value: Text | None = None


class Criterion(BaseModel):
    """One entry of ``condition.allOf``: a metric (or log query) criterion and the value it saw."""

    model_config = ConfigDict(extra="ignore")

    metricName: Text | None = None
    dimensions: list[Dimension] | None = Field(default=None, max_length=MAX_ITEMS)
    metricValue: float | None = None


class Condition(BaseModel):
    """``alertContext.condition`` of a metric or log search alert (``conditionType`` set)."""

    model_config = ConfigDict(extra="ignore")

    allOf: list[Criterion] = Field(default_factory=list, max_length=MAX_ITEMS)


class AlertContext(BaseModel):
    """``data.alertContext``: the managed Prometheus fields, or a metric/log alert's condition; others ignored."""

    model_config = ConfigDict(extra="ignore")

    expression: Text | None = None
    expressionValue: Text | None = None
    labels: dict[str, Text | None] | None = Field(default=None, max_length=MAX_ITEMS)
    annotations: dict[str, Text | None] | None = Field(default=None, max_length=MAX_ITEMS)
    ruleGroup: Text | None = None
    conditionType: Text | None = None
    condition: Condition | None = None
    properties: dict[str, Text | None] | None = Field(default=None, max_length=MAX_ITEMS)


class AlertData(BaseModel):
    """``data``: essentials, the kind's context and the rule's custom properties."""

    model_config = ConfigDict(extra="ignore")

    essentials: Essentials
    alertContext: AlertContext | None = None
    customProperties: dict[str, Text | None] | None = Field(default=None, max_length=MAX_ITEMS)


class AzureMonitorPayload(BaseModel):
    """The body an action group's webhook sends with the common alert schema enabled."""

    model_config = ConfigDict(extra="ignore")

    schemaId: Text
    data: AlertData


def parse_humanized(text: str | None) -> float | None:
    """A number from ``93``, ``12.7m`` or ``1.5k`` (Prometheus' humanized form); NaN/Inf kept as floats; None when
    the text is no number."""
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        pass
    match = _HUMANIZED.match(text)
    if match is None or match.group(2) not in _SI:
        return None
    return float(match.group(1)) * 10.0 ** _SI[match.group(2)]


def _clean(mapping: dict[str, str | None] | None) -> dict[str, str]:
    return {str(k): v for k, v in (mapping or {}).items() if v is not None}


def _labels(data: AlertData) -> dict[str, str]:
    """The Prometheus rule's labels, else the metric criteria's dimensions; the rule's custom properties
    (``customProperties``, or ``alertContext.properties`` where newer payloads put them) fill in what neither has,
    so a metric alert can carry ``autoscaler_pool`` there; ``alertname`` is the Prometheus ``alertname`` label or
    else the essentials' ``alertRule``."""
    ctx = data.alertContext or AlertContext()
    labels = _clean(ctx.labels)
    for criterion in (ctx.condition.allOf if ctx.condition else []):
        for dim in criterion.dimensions or []:
            if dim.value is not None:
                labels.setdefault(dim.name, dim.value)
    for key, value in (_clean(data.customProperties) | _clean(ctx.properties)).items():
        labels.setdefault(key, value)
    if not labels.get("alertname") and data.essentials.alertRule:
        labels["alertname"] = data.essentials.alertRule
    return labels


def _values(ctx: AlertContext | None) -> tuple[float | None, dict[str, float]]:
    """The value the policy reads (``expressionValue``, else the first criterion's ``metricValue``) and each
    criterion's value by metric name (a direction's ``value_ref`` picks one)."""
    if ctx is None:
        return None, {}
    if ctx.expressionValue is not None:
        return parse_humanized(ctx.expressionValue), {}
    given = [(c.metricName or f"criterion{i}", c.metricValue) for i, c in enumerate(ctx.condition.allOf)
             if c.metricValue is not None] if ctx.condition else []
    by_name = {name: value for name, value in given if value is not None and math.isfinite(value)}
    return (given[0][1] if given else None), by_name


def _fingerprint(alert_id: str, labels: dict[str, str]) -> str:
    """The alert instance's id (the last segment of ``alertId``), short enough for an event."""
    last = alert_id.rstrip("/").rsplit("/", 1)[-1]
    return last[:64] if last else fingerprint_of(labels)


def parse(body: Any, query: dict[str, str]) -> Notification:
    """A Notification of one alert from a common-alert-schema body; PayloadError when it is not one."""
    if not isinstance(body, dict):
        raise PayloadError("not an Azure Monitor alert: the body must be a JSON object")
    schema = body.get("schemaId")
    if schema != SCHEMA_ID:
        shown = "no schemaId" if schema is None else f"schemaId {str(schema)[:80]!r}"
        raise PayloadError(f"not an Azure Monitor common alert schema body ({shown}): enable the common alert "
                           f"schema on the action group's webhook action (schemaId {SCHEMA_ID!r})")
    try:
        payload = AzureMonitorPayload.model_validate(body)
    except ValidationError as exc:
        raise PayloadError(f"not a valid Azure Monitor alert: {validation_message(exc)}") from None
    data = payload.data
    essentials = data.essentials
    condition = essentials.monitorCondition.strip().lower()
    labels = _labels(data)
    value, values = _values(data.alertContext)
    annotations = _clean(data.alertContext.annotations if data.alertContext else None)
    alert = Alert(
        name=labels.get("alertname", ""),
        fingerprint=_fingerprint(essentials.alertId, labels),
        status=CONDITIONS[condition],
        labels=labels,
        annotations=annotations,
        starts_at=essentials.firedDateTime or "",
        value=value,
        values=values,
        dedup_key=f"{Source.AZURE_MONITOR.value}|{essentials.alertId}|{condition}",
    )
    return Notification(source=Source.AZURE_MONITOR, alerts=(alert,), query=query)
