"""Prometheus rule evaluation and Alertmanager grouping, emulated closely enough to replay a trace.

Each rule is its own Alertmanager group with one alert. A rule fires once its condition has held for ``for``;
the group's first notification goes out ``group_wait`` later; after that the group is flushed every
``group_interval`` and sends again when the alert changed (fired anew, resolved) or ``repeat_interval`` has
passed since the last notification. A resolved alert is sent once, then the group is gone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoscaler.config.durations import rfc3339
from autoscaler.config import ReplayConfig, ReplayRule, RoutingConfig
from autoscaler.sources import fingerprint_of

ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass
class _RuleState:
    rule: ReplayRule
    labels: dict[str, str]
    active_at: float | None = None  # condition true since (pending or firing)
    fired_at: float | None = None  # firing since; None while inactive or pending
    resolved_at: float | None = None
    last_fired_at: float | None = None
    value: float = 0.0
    # Alertmanager group
    group: bool = False
    last_key: tuple[str, float | None] | None = None
    last_sent: float | None = None


@dataclass
class AlertEmulator:
    """Evaluates rules on a utilisation value and says when to flush which group, and what it sends."""

    config: ReplayConfig
    routing: RoutingConfig
    use_steps: bool = True
    states: list[_RuleState] = field(default_factory=list)

    def __post_init__(self) -> None:
        for rule in self.config.rules:
            labels = {**rule.labels, "alertname": rule.alert, self.routing.pool_label: rule.pool,
                      self.routing.action_label: rule.action.value}
            if rule.step and self.use_steps:
                labels[self.routing.step_label] = str(rule.step)
            self.states.append(_RuleState(rule, labels))

    def evaluate(self, now: float, utilization: float, pending: float = 0.0) -> list[tuple[float, int]]:
        """One evaluation of every rule (on utilisation, or on pending GPUs for ``pending_above``); returns (time,
        rule index) of group flushes to schedule."""
        flushes = []
        for index, st in enumerate(self.states):
            rule = st.rule
            if rule.pending_above is not None:
                st.value = pending
                holds = pending > rule.pending_above
            else:
                st.value = utilization
                holds = utilization > rule.above if rule.above is not None else utilization < (rule.below or 0.0)
            if holds:
                if st.active_at is None:
                    st.active_at = now
                if st.fired_at is None and now - st.active_at >= rule.for_:
                    st.fired_at = st.last_fired_at = now
                    st.resolved_at = None
                    if not st.group:
                        st.group = True
                        flushes.append((now + self.config.group_wait, index))
            else:
                if st.fired_at is not None:
                    st.resolved_at = now
                st.active_at = st.fired_at = None
        return flushes

    def flush(self, now: float, index: int) -> tuple[dict[str, Any] | None, float | None]:
        """The group's notification body if it has one to send now, and when to flush it next (None: gone)."""
        st = self.states[index]
        if not st.group:
            return None, None
        firing = st.fired_at is not None
        key = ("firing" if firing else "resolved", st.last_fired_at)
        due = st.last_sent is None or now - st.last_sent >= self.config.repeat_interval
        body = None
        if key != st.last_key or (firing and due):
            body = self._body(st, firing)
            st.last_key, st.last_sent = key, now
        if not firing:
            st.group, st.last_key, st.last_sent = False, None, None
            return body, None
        return body, now + self.config.group_interval

    def _body(self, st: _RuleState, firing: bool) -> dict[str, Any]:
        status = "firing" if firing else "resolved"
        alert = {
            "status": status,
            "labels": dict(st.labels),
            "annotations": {"value": f"{st.value:.6g}",
                            "summary": (f"{st.value:g} GPUs requested by Pending pods of pool {st.rule.pool}"
                                        if st.rule.pending_above is not None else
                                        f"average utilisation {st.value:.1f}% of pool {st.rule.pool}")},
            "startsAt": rfc3339(st.last_fired_at or 0.0),
            "endsAt": rfc3339(st.resolved_at) if not firing and st.resolved_at is not None else ZERO_TIME,
            "generatorURL": "",
            "fingerprint": fingerprint_of(st.labels),
        }
        return {
            "version": "4",
            "groupKey": f"{{}}:{{alertname=\"{st.rule.alert}\"}}",
            "status": status,
            "receiver": "autoscaler",
            "groupLabels": {"alertname": st.rule.alert},
            "commonLabels": dict(st.labels),
            "commonAnnotations": {},
            "externalURL": "http://alertmanager.replay",
            "alerts": [alert],
        }
