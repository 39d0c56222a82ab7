"""Which pool and action an alert asks for (its labels, then the first matching rule, then the URL's query), and
how a notification's alerts become signals: one per pool and action, or a note of why there is nothing to act on."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from typing import Mapping

from autoscaler.config import MAX_MATCHED_LABEL, MAX_NODES, RoutingConfig, RuleConfig
from autoscaler.models import (Action, Alert, AlertStatus, Decision, Notification, Outcome, PoolSpec, Signal,
                               usable_value)

ACTIONS = {a.value: a for a in Action}


@dataclass(frozen=True)
class Route:
    """Where one alert goes; ``problem`` is set (and pool/action may be None) when it goes nowhere."""

    pool: str | None
    action: Action | None
    step: int | None
    problem: str = ""


class GroupKind(str, enum.Enum):
    """Why alerts of one notification went together."""

    TEST = "test"  # Grafana's test notification
    RESOLVED = "resolved"
    IGNORED = "ignored"  # Grafana legacy no_data / paused / pending
    UNROUTED = "unrouted"  # no pool or no action, or a bad step
    UNKNOWN = "unknown"  # a pool the config does not have
    ACT = "act"  # firing, routed to a configured pool: a signal


@dataclass(frozen=True)
class Unacted:
    """Alerts that routing alone settles: the decision to record (never acted on) and the alerts it covers."""

    decision: Decision
    alerts: tuple[Alert, ...]


_Key = tuple[GroupKind, "str | None", "Action | None", str]  # kind, pool, action, problem


class Router:
    """Routes alerts with the config's label names and rules (regexes compiled once)."""

    def __init__(self, routing: RoutingConfig, rules: list[RuleConfig],
                 groups: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.routing = routing
        self.groups = dict(groups or {})  # a group's name routes like a pool's; the engine picks the member
        self.rules = [(rule, {k: re.compile(v) for k, v in rule.match_re.items()}) for rule in rules]

    def _rule(self, labels: dict[str, str]) -> RuleConfig | None:
        for rule, patterns in self.rules:
            if all(labels.get(k) == v for k, v in rule.match.items()) and all(
                _short(labels.get(k, "")) and p.fullmatch(labels.get(k, "")) for k, p in patterns.items()
            ):
                return rule
        return None

    def route(self, alert: Alert, query: dict[str, str]) -> Route:
        """The pool, action and step for one alert, each from the first place that names it."""
        labels = alert.labels
        rule = self._rule(labels)
        pool = labels.get(self.routing.pool_label) or (rule.pool if rule else None) or query.get("pool") or None
        action_text = labels.get(self.routing.action_label) or (rule.action.value if rule else None) \
            or query.get("action") or None
        step_text = labels.get(self.routing.step_label) or (str(rule.step) if rule and rule.step else None) \
            or query.get("step") or None
        if not pool or not action_text:
            missing = " and ".join(n for n, v in (("pool", pool), ("action", action_text)) if not v)
            return Route(pool, None, None, f"no {missing}: set labels {self.routing.pool_label}/"
                                           f"{self.routing.action_label}, a matching rule, or ?pool=&action=")
        action = ACTIONS.get(action_text.strip().lower())
        if action is None:
            return Route(pool, None, None, f"unknown action {action_text!r} (use scale_out, scale_in or repair)")
        step, problem = parse_step(step_text)
        return Route(pool, action, step, problem)


    def signals(self, note: Notification, pools: Mapping[str, PoolSpec]) -> list[Signal | Unacted]:
        """One signal per pool and action the notification's firing alerts ask for, one ``Unacted`` per group of
        the rest (test, resolved, ignored, unrouted, unknown pool), in the order the groups first appear."""
        groups: dict[_Key, list[Alert]] = {}
        steps: dict[_Key, int] = {}
        for alert in note.alerts:
            route = self.route(alert, note.query)
            key: _Key
            if alert.is_test:
                key = (GroupKind.TEST, route.pool, None, "")
            elif alert.status == AlertStatus.RESOLVED:
                key = (GroupKind.RESOLVED, route.pool, route.action, "")
            elif alert.status == AlertStatus.IGNORED:
                key = (GroupKind.IGNORED, route.pool, route.action, "")
            elif route.problem:
                key = (GroupKind.UNROUTED, route.pool, None, route.problem)
            elif route.pool not in pools and route.pool not in self.groups:
                key = (GroupKind.UNKNOWN, route.pool, route.action, "")
            else:
                key = (GroupKind.ACT, route.pool, route.action, "")
                if route.step:
                    steps[key] = max(steps.get(key, 0), route.step)
            groups.setdefault(key, []).append(alert)
        out = [_group(note, kind, pool, action, problem, tuple(alerts), steps.get((kind, pool, action, problem)),
                      pools, self.groups)
               for (kind, pool, action, problem), alerts in groups.items()]
        return [self._named_nodes(item) for item in out]

    def _named_nodes(self, item: Signal | Unacted) -> Signal | Unacted:
        """A scale-in (or repair) signal carries the nodes its alerts name (``routing.node_label``), first-seen
        order."""
        if not isinstance(item, Signal) or item.action not in (Action.SCALE_IN, Action.REPAIR):
            return item
        names = [a.labels.get(self.routing.node_label, "").strip() for a in item.alerts]
        return replace(item, nodes=tuple(dict.fromkeys(n for n in names if n)))


def _group(note: Notification, kind: GroupKind, pool: str | None, action: Action | None, problem: str,
           alerts: tuple[Alert, ...], step: int | None, pools: Mapping[str, PoolSpec],
           groups: Mapping[str, tuple[str, ...]]) -> Signal | Unacted:
    names = _names(alerts)

    def unacted(outcome: Outcome, reason: str, with_action: bool = True) -> Unacted:
        return Unacted(Decision(pool, action if with_action else None, outcome, None, None, reason), alerts)

    if kind is GroupKind.TEST:
        return unacted(Outcome.IGNORED_TEST, "Grafana test notification: recorded, never acted on", False)
    if kind is GroupKind.RESOLVED:
        return unacted(Outcome.IGNORED_RESOLVED, f"resolved notification for {names}: resolving never scales")
    if kind is GroupKind.IGNORED:
        states = ", ".join(sorted({a.annotations.get("state", "?") for a in alerts}))
        return unacted(Outcome.IGNORED_RESOLVED, f"Grafana legacy state {states} for {names} is not an alert; ignored")
    if kind is GroupKind.UNROUTED:
        return unacted(Outcome.UNROUTED, f"{names}: {problem}", False)
    if kind is GroupKind.UNKNOWN:
        return unacted(Outcome.UNKNOWN_POOL, f"{names} asks for pool {_short_text(pool or '')!r}, which is not "
                                             "configured (as a pool or a group)")
    assert pool is not None and action is not None  # an ACT group is routed to a configured pool or group
    spec = pools[groups[pool][0]] if pool in groups else pools[pool]  # a group reads its first pool's settings
    value_ref = spec.direction(action).value_ref
    value, problem = usable_value([v for v in (a.value_for(value_ref) for a in alerts) if v is not None])
    return Signal(pool=pool, action=action, source=note.source, step=step, alerts=alerts, reason=f"alert {names}",
                  value=value, value_problem=problem)


MAX_NAMES = 20  # alert names listed in one reason; the event's ``alerts`` keep every one


def _names(alerts: tuple[Alert, ...]) -> str:
    """The alerts' distinct names for a reason, at most ``MAX_NAMES`` (each shortened) and how many more."""
    distinct = sorted({a.name or "(unnamed)" for a in alerts})
    shown = ", ".join(_short_text(n) for n in distinct[:MAX_NAMES])
    return shown + (f" and {len(distinct) - MAX_NAMES} more" if len(distinct) > MAX_NAMES else "")


def _short_text(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _short(value: str) -> bool:
    """Whether a label is short enough to try a ``match_re`` pattern on (a longer one never matches)."""
    return len(value) <= MAX_MATCHED_LABEL


def parse_step(text: str | None) -> tuple[int | None, str]:
    """A step of 1..MAX_NODES from a label or query value; (None, problem) when it is not one."""
    if text is None or text == "":
        return None, ""
    try:
        step = int(str(text).strip())
    except ValueError:
        return None, f"step {text!r} is not a whole number"
    if not 1 <= step <= MAX_NODES:
        return None, f"step {step} is outside 1..{MAX_NODES}"
    return step, ""
