"""Labels first, then the first matching rule, then the URL's query."""
from __future__ import annotations

import pytest

from autoscaler.models import Action, Alert
from autoscaler.routing import Router
from autoscaler.config import RoutingConfig, RuleConfig

RULES = [
    RuleConfig(match={"alertname": "GPUUtilizationHigh"}, pool="a100", action=Action.SCALE_OUT),
    RuleConfig(match_re={"alertname": "GPU(Low|Idle)", "cluster": "prod-.*"}, pool="a100", action=Action.SCALE_IN,
               step=2),
    RuleConfig(match={"team": "ml"}, match_re={"alertname": "Queue.*"}, pool="t4", action=Action.SCALE_OUT),
]
ROUTER = Router(RoutingConfig(), RULES)


def alert(**labels: str) -> Alert:
    return Alert(name=labels.get("alertname", ""), fingerprint="f", status="firing", labels=labels)


@pytest.mark.parametrize("labels,query,expected", [
    pytest.param({"alertname": "X", "autoscaler_pool": "p", "autoscaler_action": "scale_in"}, {},
                 ("p", Action.SCALE_IN, None), id="labels"),
    pytest.param({"alertname": "GPUUtilizationHigh", "autoscaler_pool": "other"}, {},
                 ("other", Action.SCALE_OUT, None), id="label-beats-rule-field-by-field"),
    pytest.param({"alertname": "GPUUtilizationHigh"}, {"pool": "q", "action": "scale_in"},
                 ("a100", Action.SCALE_OUT, None), id="rule-beats-query"),
    pytest.param({"alertname": "GPUIdle", "cluster": "prod-eu"}, {}, ("a100", Action.SCALE_IN, 2), id="match-re-step"),
    pytest.param({"alertname": "GPUIdle", "cluster": "dev"}, {"pool": "q", "action": "scale_out"},
                 ("q", Action.SCALE_OUT, None), id="regex-is-anchored-falls-to-query"),
    pytest.param({"alertname": "QueueDeep", "team": "ml"}, {}, ("t4", Action.SCALE_OUT, None), id="match-and-match-re"),
    pytest.param({"alertname": "Anything"}, {"pool": "q", "action": "scale_out", "step": "3"},
                 ("q", Action.SCALE_OUT, 3), id="query-only"),
    pytest.param({"alertname": "A", "autoscaler_pool": "p", "autoscaler_action": "scale_out", "autoscaler_step": "4"},
                 {"step": "2"}, ("p", Action.SCALE_OUT, 4), id="step-label-beats-query"),
    pytest.param({"alertname": "A", "autoscaler_pool": "p", "autoscaler_action": "SCALE_OUT"}, {},
                 ("p", Action.SCALE_OUT, None), id="action-case-insensitive"),
])
def test_route(labels: dict[str, str], query: dict[str, str], expected: tuple[object, ...]) -> None:
    route = ROUTER.route(alert(**labels), query)
    assert route.problem == ""
    assert (route.pool, route.action, route.step) == expected


@pytest.mark.parametrize("labels,query,problem", [
    pytest.param({"alertname": "Unknown"}, {}, "no pool and action", id="nothing"),
    pytest.param({"alertname": "U", "autoscaler_pool": "p"}, {}, "no action", id="no-action"),
    pytest.param({"alertname": "U", "autoscaler_pool": "p", "autoscaler_action": "grow"}, {}, "unknown action 'grow'",
                 id="bad-action"),
    pytest.param({"alertname": "U", "autoscaler_pool": "p", "autoscaler_action": "scale_out", "autoscaler_step": "0"},
                 {}, "step 0 is outside 1..1000", id="step-zero"),
    pytest.param({"alertname": "U", "autoscaler_pool": "p", "autoscaler_action": "scale_out", "autoscaler_step": "x"},
                 {}, "step 'x' is not a whole number", id="step-text"),
])
def test_unrouted(labels: dict[str, str], query: dict[str, str], problem: str) -> None:
    assert problem in ROUTER.route(alert(**labels), query).problem


def test_custom_label_names() -> None:
    router = Router(RoutingConfig(pool_label="pool", action_label="do", step_label="n"), [])
    route = router.route(alert(alertname="a", pool="x", do="scale_in", n="2"), {})
    assert (route.pool, route.action, route.step) == ("x", Action.SCALE_IN, 2)
