"""Alertmanager webhook payload, version 4."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.models import Alert, AlertStatus, Notification, Source
from autoscaler.sources import PayloadError, Text, fingerprint_of, parse_value, validation_message


class AlertmanagerAlert(BaseModel):
    """One alert as Alertmanager sends it."""

    model_config = ConfigDict(extra="ignore")

    status: Text = "firing"
    labels: dict[str, Text] = Field(default_factory=dict)
    annotations: dict[str, Text] = Field(default_factory=dict)
    startsAt: Text = ""
    endsAt: Text = ""
    generatorURL: Text = ""
    fingerprint: Text = ""


class AlertmanagerPayload(BaseModel):
    """The notification body of a ``webhook_configs`` receiver."""

    model_config = ConfigDict(extra="ignore")

    version: Text = "4"
    groupKey: Text = ""
    truncatedAlerts: int = 0
    status: Text = "firing"
    receiver: Text = ""
    groupLabels: dict[str, Text] = Field(default_factory=dict)
    commonLabels: dict[str, Text] = Field(default_factory=dict)
    commonAnnotations: dict[str, Text] = Field(default_factory=dict)
    externalURL: Text = ""
    alerts: list[AlertmanagerAlert] = Field(max_length=100_000)


def to_alert(raw: AlertmanagerAlert, source: Source, value: float | None = None) -> Alert:
    """Our Alert from an Alertmanager-shaped alert (Grafana unified alerts share the shape)."""
    labels = dict(raw.labels)
    fingerprint = raw.fingerprint or fingerprint_of(labels)
    status = AlertStatus.RESOLVED if raw.status.lower() == "resolved" else AlertStatus.FIRING
    if value is None:
        value = parse_value(raw.annotations.get("value"))
    return Alert(
        name=labels.get("alertname", ""),
        fingerprint=fingerprint,
        status=status,
        labels=labels,
        annotations=dict(raw.annotations),
        starts_at=raw.startsAt,
        value=value,
        dedup_key=f"{source.value}|{fingerprint}|{raw.startsAt}|{status.value}",
    )


def parse(body: Any, query: dict[str, str]) -> Notification:
    """A Notification from an Alertmanager body; PayloadError when it is not one."""
    if not isinstance(body, dict) or "alerts" not in body:
        raise PayloadError("not an Alertmanager notification: no `alerts` list")
    try:
        payload = AlertmanagerPayload.model_validate(body)
    except ValidationError as exc:
        raise PayloadError(f"not a valid Alertmanager notification: {validation_message(exc)}") from None
    alerts = tuple(to_alert(a, Source.ALERTMANAGER) for a in payload.alerts)
    return Notification(source=Source.ALERTMANAGER, alerts=alerts, query=query)
