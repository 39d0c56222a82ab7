"""Which pool and action an alert asks for: its labels, then the first matching rule, then the URL's query."""
from __future__ import annotations

import re
from dataclasses import dataclass

from autoscaler.models import Action, Alert
from autoscaler.config_schema import RoutingConfig, RuleConfig

ACTIONS = {a.value: a for a in Action}


@dataclass(frozen=True)
class Route:
    """Where one alert goes; ``problem`` is set (and pool/action may be None) when it goes nowhere."""

    pool: str | None
    action: Action | None
    step: int | None
    problem: str = ""


class Router:
    """Routes alerts with the config's label names and rules (regexes compiled once)."""

    def __init__(self, routing: RoutingConfig, rules: list[RuleConfig]) -> None:
        self.routing = routing
        self.rules = [(rule, {k: re.compile(v) for k, v in rule.match_re.items()}) for rule in rules]

    def _rule(self, labels: dict[str, str]) -> RuleConfig | None:
        for rule, patterns in self.rules:
            if all(labels.get(k) == v for k, v in rule.match.items()) and all(
                p.fullmatch(labels.get(k, "")) for k, p in patterns.items()
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
            return Route(pool, None, None, f"unknown action {action_text!r} (use scale_out or scale_in)")
        step, problem = parse_step(step_text)
        return Route(pool, action, step, problem)


def parse_step(text: str | None) -> tuple[int | None, str]:
    """A step of 1..1000 from a label or query value; (None, problem) when it is not one."""
    if text is None or text == "":
        return None, ""
    try:
        step = int(str(text).strip())
    except ValueError:
        return None, f"step {text!r} is not a whole number"
    if not 1 <= step <= 1000:
        return None, f"step {step} is outside 1..1000"
    return step, ""
